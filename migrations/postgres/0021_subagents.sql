-- Sub-agents (SPEC section 24; the same schema as SQLite's). A run that may delegate keeps its
-- sub-agents as resolved when it was accepted (`subagents`: JSON, each
-- with what its child runs are made from) and what its children used
-- (`children_usage`: JSON totals, their own usage_total summed). A child
-- names its parent (`parent_run_id`), the `delegate` call that started it
-- (`call_id`) and the rest of its place in the tree (`subrun`: JSON, the
-- root, the sub-agent's name, its depth, the run whose workspace it
-- shares).
ALTER TABLE runs ADD COLUMN subagents TEXT;
ALTER TABLE runs ADD COLUMN children_usage TEXT;
ALTER TABLE runs ADD COLUMN call_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN subrun TEXT;
-- While a child waits for a decision, its pending actions, listed on its
-- parent (JSON; null when none): the parent, still running, shows them.
ALTER TABLE runs ADD COLUMN delegated_actions TEXT;

-- No call starts two children, whoever resumes its parent.
CREATE UNIQUE INDEX runs_subruns ON runs (parent_run_id, call_id)
    WHERE call_id IS NOT NULL;
