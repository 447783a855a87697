-- A claimed run whose stored state could not be read is given back to the
-- queue to be tried again later, not at once: until `not_before` (RFC 3339)
-- every claim passes it by, so that the runs behind it go on.
-- `failed_reads` counts such failures in a row: each doubles the wait.
ALTER TABLE runs ADD COLUMN not_before TEXT;
ALTER TABLE runs ADD COLUMN failed_reads BIGINT NOT NULL DEFAULT 0;
