-- Tenants share fairly: a tenant's waiting runs, oldest first, are found
-- without reading the other tenants' (its queue limit, its next run).
CREATE INDEX runs_queued_by_tenant ON runs (tenant, id) WHERE status = 'queued';
