-- Agents: definitions stored once, named by runs. `agents` holds each
-- name's latest version and whether it is archived; `agent_versions` every
-- version, never changed once written (the definition as accepted, JSON).
CREATE TABLE agents (
    tenant    TEXT NOT NULL,
    name      TEXT NOT NULL,
    latest    INTEGER NOT NULL,
    archived  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE agent_versions (
    tenant       TEXT NOT NULL,
    name         TEXT NOT NULL,
    version      INTEGER NOT NULL,
    description  TEXT,
    definition   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (tenant, name, version)
) STRICT, WITHOUT ROWID;

-- The agent (and version) a run was made from, its output schema (JSON)
-- and its output (the final answer's JSON document, once valid).
ALTER TABLE runs ADD COLUMN agent_name TEXT;
ALTER TABLE runs ADD COLUMN agent_version INTEGER;
ALTER TABLE runs ADD COLUMN output_schema TEXT;
ALTER TABLE runs ADD COLUMN output TEXT;
