-- Kept alike with PostgreSQL's 0014 (the same schema, migration for
-- migration). On PostgreSQL a claimed run whose stored state could not be
-- read waits in the queue until `not_before`; on SQLite the queue is the
-- one server's own, and its run's task waits instead, so these stay unset.
ALTER TABLE runs ADD COLUMN not_before TEXT;
ALTER TABLE runs ADD COLUMN failed_reads INTEGER NOT NULL DEFAULT 0;
