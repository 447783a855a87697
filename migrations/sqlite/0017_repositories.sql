-- Repositories in, patches out. A run's seed besides its files (`seed`:
-- JSON, a git clone's URL and ref, an upload's id; never a credential),
-- the files its request gave (`seed_files`: JSON, its starting tree when
-- they are all it started from, and what is written over a clone), and
-- what it changed once it ended (`changes`: JSON counts).
ALTER TABLE runs ADD COLUMN seed TEXT;
ALTER TABLE runs ADD COLUMN seed_files TEXT;
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
