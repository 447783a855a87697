-- Repositories in, patches out. A run's seed besides its files (`seed`:
-- JSON, a git clone's URL and ref, an upload's id; never a credential),
-- and what it changed once it ended (`changes`: JSON counts).
ALTER TABLE runs ADD COLUMN seed TEXT;
ALTER TABLE runs ADD COLUMN changes TEXT;

-- Uploaded archives, unpacked beside the workspaces; the tenant's own.
CREATE TABLE uploads (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    files       INTEGER NOT NULL,
    created_at  TEXT NOT NULL
) STRICT;

CREATE INDEX uploads_by_created ON uploads (created_at);

-- The files a run's request gave to be written over a clone or an upload,
-- which whichever process starts the run fetches (a run of files alone has
-- them written when it is accepted). A table of its own, written once: a
-- run's row is rewritten whole by every update, and these can be large.
CREATE TABLE run_seed_files (
    run_id  TEXT PRIMARY KEY,
    files   TEXT NOT NULL
) STRICT;
