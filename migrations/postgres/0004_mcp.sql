-- MCP: the servers whose tools a run uses (a JSON array of their names).

ALTER TABLE runs ADD COLUMN mcp_servers TEXT NOT NULL DEFAULT '[]';
