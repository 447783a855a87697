-- Traces: the sampled flag (1 or 0) of the `traceparent` a run's creator sent
-- (whether the caller records its trace); a run's spans follow it. A run
-- without one decides by the server's sample ratio from its trace id.
ALTER TABLE runs ADD COLUMN trace_sampled INTEGER NOT NULL DEFAULT 1 CHECK (trace_sampled IN (0, 1));
