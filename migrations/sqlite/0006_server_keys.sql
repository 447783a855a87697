-- Keys the server makes for itself, once, and keeps: the key that signs
-- stream tokens (hex), the same for every replica of a database.
CREATE TABLE server_keys (
    name  TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID;
