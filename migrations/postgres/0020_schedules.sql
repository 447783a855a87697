-- Schedules (SPEC section 23; the same schema as SQLite's, times in byte
-- order): a cron, its timezone and the run body each tick makes.
-- `next_run_at` is the next tick due (RFC 3339 UTC), advanced by whoever
-- made (or skipped, or was refused) the one before: a compare on it lets
-- one replica alone count a tick.
CREATE TABLE schedules (
    id             TEXT COLLATE "C" PRIMARY KEY,
    tenant         TEXT COLLATE "C" NOT NULL,
    name           TEXT,
    cron           TEXT NOT NULL,
    timezone       TEXT NOT NULL,
    body           TEXT NOT NULL,
    thread         TEXT NOT NULL,
    overlap        TEXT NOT NULL,
    enabled        BIGINT NOT NULL,
    next_run_at    TEXT COLLATE "C" NOT NULL,
    skipped_ticks  BIGINT NOT NULL DEFAULT 0,
    refused_ticks  BIGINT NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE INDEX schedules_by_tenant ON schedules (tenant, id);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled = 1;

-- A run a schedule made names it, and the tick it was made for: one run a
-- tick, whoever makes it (a trigger's run has no tick).
ALTER TABLE runs ADD COLUMN schedule_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN schedule_tick TEXT COLLATE "C";
CREATE UNIQUE INDEX runs_schedule_ticks ON runs (schedule_id, schedule_tick)
    WHERE schedule_tick IS NOT NULL;
CREATE INDEX runs_by_schedule ON runs (schedule_id, id) WHERE schedule_id IS NOT NULL;

-- A busy thread (SPEC section 23): a run queued behind a live one waits
-- for its end (`waiting_for`); `copy_pending` says its transcript and
-- workspace are taken from `previous_run_id` as it starts, not as it was
-- accepted (the run it continues had not ended then).
ALTER TABLE runs ADD COLUMN waiting_for TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN copy_pending BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_waiting ON runs (waiting_for) WHERE waiting_for IS NOT NULL;
