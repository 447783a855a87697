-- Durable runs: how often a run was resumed after its process stopped.
ALTER TABLE runs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
