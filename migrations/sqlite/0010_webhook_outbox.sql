-- Durable webhooks: each end or pause of a run that has a webhook waits here
-- for its delivery, written in the same transaction as the change it tells
-- of, and removed once delivered (or given up). Times are RFC 3339 UTC.
CREATE TABLE webhook_deliveries (
    -- The delivery's `webhook-id`, the same on every attempt.
    id            TEXT PRIMARY KEY NOT NULL,
    run_id        TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    tenant        TEXT NOT NULL,
    -- The change it tells of: the run's status, and when it changed.
    status        TEXT NOT NULL,
    at            TEXT NOT NULL,
    -- When it was written: it is given up `retry_for_ms` after this.
    created_at    TEXT NOT NULL,
    -- Attempts that failed so far, and when it may be tried next.
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_at       TEXT NOT NULL,
    -- The columns PostgreSQL's replicas claim a delivery with (see the
    -- PostgreSQL migration of the same number), kept here so that both
    -- engines take the same statements. A SQLite database has one server:
    -- it never sets them.
    claimed_by    TEXT,
    claimed_until TEXT
) STRICT, WITHOUT ROWID;

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at);
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (run_id);
