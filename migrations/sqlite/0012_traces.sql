-- Traces: the trace each run's spans belong to (32 hex digits), and the
-- caller's span when its creator sent a `traceparent` (16 hex digits).
-- Runs stored before have none: each gets a trace of its own when it
-- executes.
ALTER TABLE runs ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN parent_span_id TEXT;
