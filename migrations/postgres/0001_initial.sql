-- Runs, their transcripts and their events (PostgreSQL; the same schema as
-- SQLite's, migration for migration). Ids are UUIDv7 text, so ordering by id
-- is ordering by creation time: in byte order (COLLATE "C"), as in SQLite,
-- whatever the database's own collation.

CREATE TABLE runs (
    id                     TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    tenant                 TEXT NOT NULL,
    status                 TEXT NOT NULL,
    prompt                 TEXT NOT NULL,
    answer                 TEXT,
    error                  TEXT,
    steps                  BIGINT NOT NULL DEFAULT 0,
    tool_calls             BIGINT NOT NULL DEFAULT 0,
    input_tokens           BIGINT NOT NULL DEFAULT 0,
    output_tokens          BIGINT NOT NULL DEFAULT 0,
    model_calls_with_usage BIGINT NOT NULL DEFAULT 0,
    -- JSON documents of the accepted request, as the run object shows them.
    limits                 TEXT NOT NULL,
    context                TEXT NOT NULL,
    tools                  TEXT NOT NULL,
    commands               TEXT NOT NULL,
    model                  TEXT NOT NULL,
    metadata               TEXT NOT NULL,
    -- What is needed to start the run again after a restart (the profile name
    -- or the inline script). Never served.
    model_spec             TEXT NOT NULL,
    idempotency_key        TEXT,
    request_hash           TEXT,
    created_at             TEXT NOT NULL,
    started_at             TEXT,
    finished_at            TEXT
);

CREATE INDEX runs_by_tenant ON runs (tenant, id DESC);
CREATE INDEX runs_by_tenant_status ON runs (tenant, status, id DESC);
CREATE INDEX runs_live ON runs (status) WHERE status IN ('queued', 'running');
CREATE UNIQUE INDEX runs_idempotency ON runs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE messages (
    run_id   TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position BIGINT NOT NULL,
    body     TEXT NOT NULL,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE events (
    run_id   TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL,
    type     TEXT NOT NULL,
    body     TEXT NOT NULL,
    PRIMARY KEY (run_id, sequence)
);
