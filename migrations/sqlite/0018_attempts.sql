-- Attempts (SPEC section 27). A run tried several times has its policy
-- (`attempt_policy`: JSON, `n`, `temperature`, `until`), its attempts as
-- they stand (`attempts`: JSON, one summary each) and, once one passed,
-- `chosen_attempt`. Each attempt is a run of its own that names its
-- parent, its number and the temperature it is sent with (as its JSON
-- number's text: both engines keep it exactly as it was given).
ALTER TABLE runs ADD COLUMN parent_run_id TEXT;
ALTER TABLE runs ADD COLUMN attempt INTEGER;
ALTER TABLE runs ADD COLUMN temperature TEXT;
ALTER TABLE runs ADD COLUMN attempt_policy TEXT;
ALTER TABLE runs ADD COLUMN attempts TEXT;
ALTER TABLE runs ADD COLUMN chosen_attempt INTEGER;

-- No attempt is made twice, whoever makes it; and a parent's attempts are
-- listed by it.
CREATE UNIQUE INDEX runs_attempts ON runs (parent_run_id, attempt)
    WHERE parent_run_id IS NOT NULL;
