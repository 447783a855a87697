-- An agent's runs, newest first (GET /v1/runs?agent=). Apart from 0015
-- to keep the migrations alike with PostgreSQL's, which builds it without
-- holding up the writes of the replicas still running.
CREATE INDEX runs_by_tenant_agent ON runs (tenant, agent_name, id DESC)
    WHERE agent_name IS NOT NULL;
