-- Durable webhooks: each end or pause of a run that has a webhook waits here
-- for its delivery, written in the same transaction as the change it tells
-- of, and removed once delivered (or given up). Times are RFC 3339 UTC text,
-- compared in byte order, as the runs' are.
CREATE TABLE webhook_deliveries (
    -- The delivery's `webhook-id`, the same on every attempt.
    id            TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    run_id        TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tenant        TEXT NOT NULL,
    -- The change it tells of: the run's status, and when it changed.
    status        TEXT NOT NULL,
    at            TEXT NOT NULL,
    -- When it was written: it is given up `retry_for_ms` after this.
    created_at    TEXT COLLATE "C" NOT NULL,
    -- Attempts that failed so far, and when it may be tried next.
    attempts      BIGINT NOT NULL DEFAULT 0,
    next_at       TEXT COLLATE "C" NOT NULL,
    -- The replica delivering it, until when (on the database's clock): one
    -- replica at a time delivers it, and another takes it over once the
    -- claim runs out (its replica died in the middle).
    claimed_by    TEXT COLLATE "C",
    claimed_until TIMESTAMPTZ
);

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at);
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (run_id);
