-- Tenants share fairly, across replicas. A tenant's waiting runs, oldest
-- first, are found without reading the other tenants'.
CREATE INDEX runs_queued_by_tenant ON runs (tenant, id) WHERE status = 'queued';

-- When each tenant last had a queued run claimed, on the database's clock:
-- the next claim takes the oldest waiting run of the tenant served least
-- recently (round robin). A claim for a tenant with a concurrency limit
-- locks its row while it counts the tenant's running runs, so that two
-- replicas never both take its last slot.
CREATE TABLE tenant_turns (
    tenant  TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    served  TIMESTAMPTZ
);

-- Each tenant's token bucket of run creations (`runs_per_minute`), shared
-- by every replica: `tokens` as counted at `at`.
CREATE TABLE tenant_buckets (
    tenant  TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    tokens  DOUBLE PRECISION NOT NULL,
    at      TIMESTAMPTZ NOT NULL
);
