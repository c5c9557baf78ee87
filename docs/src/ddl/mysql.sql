CREATE TABLE IF NOT EXISTS `distlock_locks` (
  lock_key   VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lock_name  VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  version    BIGINT NOT NULL,
  expires_at DATETIME(6) NULL,
  PRIMARY KEY (lock_key)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `distlock_locks_holds` (
  primitive  VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lock_key   VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  holder     VARCHAR(72) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lock_name  VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  kind       VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  permits    INT UNSIGNED NULL,
  version    BIGINT NOT NULL,
  expires_at DATETIME(6) NULL,
  PRIMARY KEY (primitive, lock_key, holder)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `distlock_locks_weights` (
  obj_primitive VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  obj_key       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  owner         VARCHAR(72) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  token         BIGINT NOT NULL,
  weight        INT UNSIGNED NOT NULL,
  PRIMARY KEY (obj_primitive, obj_key, owner, token)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `distlock_locks_notes` (
  lock_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  holder   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  token    BIGINT NOT NULL,
  note     TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (lock_key)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `distlock_locks_schema` (
  id      TINYINT NOT NULL PRIMARY KEY,
  version BIGINT NOT NULL
) ENGINE=InnoDB;

INSERT INTO `distlock_locks_schema` (id, version) VALUES (1, 3) ON DUPLICATE KEY UPDATE version = GREATEST(version, 3);
