-- Agents: definitions stored once, named by runs (the same schema as
-- SQLite's). `agents` holds each name's latest version and whether it is
-- archived (a new version locks its row: replicas making versions of one
-- agent at once take turns); `agent_versions` every version, never changed
-- once written (the definition as accepted, JSON).
CREATE TABLE agents (
    tenant    TEXT COLLATE "C" NOT NULL,
    name      TEXT COLLATE "C" NOT NULL,
    latest    BIGINT NOT NULL,
    archived  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE agent_versions (
    tenant       TEXT COLLATE "C" NOT NULL,
    name         TEXT COLLATE "C" NOT NULL,
    version      BIGINT NOT NULL,
    description  TEXT,
    definition   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (tenant, name, version)
);

-- The agent (and version) a run was made from, its output schema (JSON)
-- and its output (the final answer's JSON document, once valid).
ALTER TABLE runs ADD COLUMN agent_name TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN agent_version BIGINT;
ALTER TABLE runs ADD COLUMN output_schema TEXT;
ALTER TABLE runs ADD COLUMN output TEXT;
