-- Conversations: a run's system prompt, and runs that continue others.

ALTER TABLE runs ADD COLUMN instructions TEXT;
-- The first run of the run's conversation (its own id unless it continues
-- another), and the run it continues.
ALTER TABLE runs ADD COLUMN thread_id TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN previous_run_id TEXT COLLATE "C";
UPDATE runs SET thread_id = id WHERE thread_id = '';

CREATE INDEX runs_by_thread ON runs (tenant, thread_id, id DESC);
