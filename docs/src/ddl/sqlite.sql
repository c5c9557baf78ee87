CREATE TABLE IF NOT EXISTS "distlock_locks" (
  lock_key   TEXT NOT NULL PRIMARY KEY,
  lock_name  TEXT NOT NULL,
  owner      TEXT,
  version    INTEGER NOT NULL,
  expires_at INTEGER
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS "distlock_locks_holds" (
  primitive  TEXT NOT NULL,
  lock_key   TEXT NOT NULL,
  holder     TEXT NOT NULL,
  lock_name  TEXT NOT NULL,
  kind       TEXT NOT NULL,
  permits    INTEGER,
  version    INTEGER NOT NULL,
  expires_at INTEGER,
  PRIMARY KEY (primitive, lock_key, holder)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS "distlock_locks_weights" (
  obj_primitive TEXT NOT NULL,
  obj_key       TEXT NOT NULL,
  owner         TEXT NOT NULL,
  token         INTEGER NOT NULL,
  weight        INTEGER NOT NULL,
  PRIMARY KEY (obj_primitive, obj_key, owner, token)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS "distlock_locks_notes" (
  lock_key TEXT NOT NULL PRIMARY KEY,
  holder   TEXT NOT NULL,
  token    INTEGER NOT NULL,
  note     TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS "distlock_locks_schema" (
  id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
  version INTEGER NOT NULL
);

INSERT INTO "distlock_locks_schema" (id, version) VALUES (1, 3) ON CONFLICT (id) DO UPDATE SET version = MAX(version, excluded.version);
