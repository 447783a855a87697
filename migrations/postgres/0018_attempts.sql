-- Attempts (SPEC section 27; the same schema as SQLite's). A run tried
-- several times has its policy (`attempt_policy`: JSON, `n`,
-- `temperature`, `until`), its attempts as they stand (`attempts`: JSON,
-- one summary each) and, once one passed, `chosen_attempt`. Each attempt is
-- a run of its own that names its parent, its number and the temperature
-- it is sent with (as its number's text, kept exactly as given).
ALTER TABLE runs ADD COLUMN parent_run_id TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN attempt BIGINT;
ALTER TABLE runs ADD COLUMN temperature TEXT;
ALTER TABLE runs ADD COLUMN attempt_policy TEXT;
ALTER TABLE runs ADD COLUMN attempts TEXT;
ALTER TABLE runs ADD COLUMN chosen_attempt BIGINT;

-- No attempt is made twice, whoever makes it; and a parent's attempts are
-- listed by it.
CREATE UNIQUE INDEX runs_attempts ON runs (parent_run_id, attempt)
    WHERE parent_run_id IS NOT NULL;
