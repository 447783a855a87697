-- Several servers (replicas) on one database. Each replica holds a lease,
-- renewed by its heartbeat on the database's clock; a running run is owned by
-- the replica that executes it. A replica whose lease ran out is taken for
-- dead: another one deletes its row and ends the runs it owned.
CREATE TABLE replicas (
    id          TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until TIMESTAMPTZ NOT NULL
);

-- The replica that executes (or last executed) a run: only a `running` run's
-- owner counts. And whether a client asked, on another replica, for its
-- cancel (it counts while the run is live).
ALTER TABLE runs ADD COLUMN owner TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT FALSE;

CREATE INDEX runs_by_owner ON runs (owner) WHERE status = 'running';
CREATE INDEX runs_queued ON runs (id) WHERE status = 'queued';
-- What the sweeps look for: cancels asked of runs that were changing hands.
CREATE INDEX runs_cancels_left ON runs (id)
    WHERE cancel_requested AND status IN ('queued', 'requires_action');
