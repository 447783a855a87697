-- The columns PostgreSQL's replicas use (see the PostgreSQL migration of the
-- same number), kept here so that both engines take the same statements. A
-- SQLite database has one server: it never sets them.
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
