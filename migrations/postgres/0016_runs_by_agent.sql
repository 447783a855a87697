-- no-transaction
-- An agent's runs, newest first (GET /v1/runs?agent=), built without
-- blocking the writes of the replicas still running: a plain CREATE INDEX
-- would hold run inserts for as long as it reads the whole table. Outside
-- a transaction, as CONCURRENTLY must be, and one statement alone (several
-- in one query would make one). A build that was interrupted leaves an
-- invalid index of this name: REINDEX INDEX CONCURRENTLY runs_by_tenant_agent
-- mends it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_tenant_agent
    ON runs (tenant, agent_name, id DESC) WHERE agent_name IS NOT NULL;
