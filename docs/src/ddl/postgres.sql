CREATE TABLE IF NOT EXISTS "distlock_locks" (
  lock_key   VARCHAR(255) COLLATE "C" NOT NULL PRIMARY KEY,
  lock_name  TEXT NOT NULL,
  owner      VARCHAR(64) COLLATE "C",
  version    BIGINT NOT NULL,
  expires_at TIMESTAMPTZ
);

CREATE TABLE IF NOT EXISTS "distlock_locks_holds" (
  primitive  VARCHAR(16) COLLATE "C" NOT NULL,
  lock_key   VARCHAR(255) COLLATE "C" NOT NULL,
  holder     VARCHAR(72) COLLATE "C" NOT NULL,
  lock_name  TEXT NOT NULL,
  kind       VARCHAR(8) COLLATE "C" NOT NULL,
  permits    INTEGER,
  version    BIGINT NOT NULL,
  expires_at TIMESTAMPTZ,
  PRIMARY KEY (primitive, lock_key, holder)
);

CREATE TABLE IF NOT EXISTS "distlock_locks_weights" (
  obj_primitive VARCHAR(16) COLLATE "C" NOT NULL,
  obj_key       VARCHAR(255) COLLATE "C" NOT NULL,
  owner         VARCHAR(72) COLLATE "C" NOT NULL,
  token         BIGINT NOT NULL,
  weight        INTEGER NOT NULL,
  PRIMARY KEY (obj_primitive, obj_key, owner, token)
);

CREATE TABLE IF NOT EXISTS "distlock_locks_notes" (
  lock_key VARCHAR(255) COLLATE "C" NOT NULL PRIMARY KEY,
  holder   VARCHAR(64) COLLATE "C" NOT NULL,
  token    BIGINT NOT NULL,
  note     TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS "distlock_locks_waiters" (
  lock_key   VARCHAR(255) COLLATE "C" NOT NULL,
  waiter     VARCHAR(64) COLLATE "C" NOT NULL,
  queued_at  TIMESTAMPTZ NOT NULL,
  expires_at TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (lock_key, waiter)
);

CREATE TABLE IF NOT EXISTS "distlock_locks_schema" (
  id      SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
  version BIGINT NOT NULL
);

CREATE OR REPLACE FUNCTION "distlock_locks_holds_try"(p_primitive text, p_key text, p_name text, p_holder text, p_kind text, p_permits integer, p_ttl_us bigint, p_waiter text, p_stay_us bigint, p_weight integer)
RETURNS TABLE (o_won boolean, o_token bigint, o_holds bigint, o_readers bigint, o_writers bigint, o_waiting bigint, o_stored bigint, o_mine bigint, o_first_permit bigint, o_last_reader bigint, o_writer bigint)
LANGUAGE plpgsql VOLATILE AS $distlock$
DECLARE
  v_now timestamptz;
  v_won boolean;
  v_token bigint;
  c record;
BEGIN
  INSERT INTO "distlock_locks_holds" (primitive, lock_key, holder, lock_name, kind, permits, version, expires_at) VALUES (p_primitive, p_key, '#', p_name, 'object', NULL, 0, NULL) ON CONFLICT (primitive, lock_key, holder) DO NOTHING;
  PERFORM 1 FROM "distlock_locks_holds" WHERE primitive = p_primitive AND lock_key = p_key AND holder = '#' FOR UPDATE;
  v_now := clock_timestamp();
  DELETE FROM "distlock_locks_holds" WHERE primitive = p_primitive AND lock_key = p_key AND kind <> 'object' AND expires_at <= v_now;
  SELECT coalesce(sum(weight) FILTER (WHERE kind <> 'waiter'), 0)::bigint AS holds,
    count(*) FILTER (WHERE kind = 'read') AS readers,
    count(*) FILTER (WHERE kind = 'write') AS writers,
    count(*) FILTER (WHERE kind = 'waiter') AS waiting,
    (min(permits) FILTER (WHERE kind = 'permit'))::bigint AS stored,
    max(version) FILTER (WHERE holder = p_holder AND kind = p_kind) AS mine,
    min(left_us) FILTER (WHERE kind = 'permit') AS first_permit,
    max(left_us) FILTER (WHERE kind = 'read') AS last_reader,
    max(left_us) FILTER (WHERE kind = 'write') AS writer,
    count(*) FILTER (WHERE kind = 'uread') AS upgraders,
    max(version) FILTER (WHERE holder = p_holder AND kind = 'uread') AS my_upgradeable
  INTO c FROM (SELECT kind, holder, permits, version, COALESCE(weight, 1) AS weight, (extract(epoch FROM (expires_at - v_now)) * 1000000)::bigint AS left_us FROM "distlock_locks_holds" LEFT JOIN "distlock_locks_weights" ON obj_primitive = primitive AND obj_key = lock_key AND owner = holder AND token = version WHERE primitive = p_primitive AND lock_key = p_key AND kind <> 'object' AND expires_at > v_now) AS live;
  v_won := c.mine IS NOT NULL OR CASE p_kind WHEN 'permit' THEN (c.stored IS NULL OR c.stored = p_permits) AND c.holds + p_weight <= p_permits WHEN 'read' THEN c.writers = 0 AND c.waiting = 0 WHEN 'uread' THEN c.writers = 0 AND c.upgraders = 0 AND c.waiting = 0 WHEN 'write' THEN c.holds = 0 OR (c.my_upgradeable IS NOT NULL AND c.holds = 1) ELSE c.holds = 0 END;
  IF c.mine IS NOT NULL THEN
    v_token := c.mine;
    UPDATE "distlock_locks_holds" SET expires_at = v_now + p_ttl_us::float8 * interval '1 microsecond' WHERE primitive = p_primitive AND lock_key = p_key AND holder = p_holder AND kind = p_kind;
  ELSIF v_won THEN
    UPDATE "distlock_locks_holds" SET version = GREATEST(version + 1, (extract(epoch FROM v_now) * 1000000)::bigint) WHERE primitive = p_primitive AND lock_key = p_key AND holder = '#' RETURNING version INTO v_token;
    IF p_kind = 'write' AND c.my_upgradeable IS NOT NULL THEN
      UPDATE "distlock_locks_holds" SET kind = 'write', version = v_token, expires_at = v_now + p_ttl_us::float8 * interval '1 microsecond' WHERE primitive = p_primitive AND lock_key = p_key AND holder = p_holder AND kind = 'uread';
    ELSE
      INSERT INTO "distlock_locks_holds" (primitive, lock_key, holder, lock_name, kind, permits, version, expires_at) VALUES (p_primitive, p_key, p_holder, p_name, p_kind, CASE WHEN p_kind = 'permit' THEN p_permits END, v_token, v_now + p_ttl_us::float8 * interval '1 microsecond');
    END IF;
    IF p_weight > 1 THEN
      INSERT INTO "distlock_locks_weights" (obj_primitive, obj_key, owner, token, weight) VALUES (p_primitive, p_key, p_holder, v_token, p_weight);
    END IF;
  END IF;
  IF p_waiter IS NOT NULL THEN
    IF v_won THEN
      DELETE FROM "distlock_locks_holds" WHERE primitive = p_primitive AND lock_key = p_key AND holder = p_waiter AND kind = 'waiter';
    ELSE
      INSERT INTO "distlock_locks_holds" (primitive, lock_key, holder, lock_name, kind, permits, version, expires_at) VALUES (p_primitive, p_key, p_waiter, p_name, 'waiter', NULL, 0, v_now + p_stay_us::float8 * interval '1 microsecond') ON CONFLICT (primitive, lock_key, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    END IF;
  END IF;
  RETURN QUERY SELECT v_won, v_token, c.holds, c.readers, c.writers, c.waiting, c.stored, c.mine, c.first_permit, c.last_reader, c.writer;
END
$distlock$;

CREATE OR REPLACE FUNCTION "distlock_locks_release"(p_key text, p_owner text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $distlock$
DECLARE
  v_now timestamptz := statement_timestamp();
  v_first text;
BEGIN
  UPDATE "distlock_locks" SET owner = NULL, expires_at = NULL WHERE lock_key = p_key AND owner = p_owner AND (expires_at IS NULL OR expires_at > v_now);
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  DELETE FROM "distlock_locks_waiters" WHERE lock_key = p_key AND expires_at <= v_now;
  DELETE FROM "distlock_locks_waiters" WHERE lock_key = p_key AND waiter = (SELECT waiter FROM "distlock_locks_waiters" WHERE lock_key = p_key ORDER BY queued_at, waiter LIMIT 1) RETURNING waiter INTO v_first;
  IF v_first IS NOT NULL THEN
    PERFORM pg_notify('distlock_locks', 'wake:' || v_first);
  END IF;
  RETURN 1;
END
$distlock$;

CREATE OR REPLACE FUNCTION "distlock_locks_leave"(p_key text, p_waiter text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $distlock$
DECLARE
  v_now timestamptz := statement_timestamp();
  v_first text;
BEGIN
  PERFORM 1 FROM "distlock_locks" WHERE lock_key = p_key FOR UPDATE;
  DELETE FROM "distlock_locks_waiters" WHERE lock_key = p_key AND waiter = p_waiter;
  IF EXISTS (SELECT 1 FROM "distlock_locks" WHERE lock_key = p_key AND owner IS NOT NULL AND expires_at > v_now) THEN
    RETURN 0;
  END IF;
  DELETE FROM "distlock_locks_waiters" WHERE lock_key = p_key AND expires_at <= v_now;
  DELETE FROM "distlock_locks_waiters" WHERE lock_key = p_key AND waiter = (SELECT waiter FROM "distlock_locks_waiters" WHERE lock_key = p_key ORDER BY queued_at, waiter LIMIT 1) RETURNING waiter INTO v_first;
  IF v_first IS NOT NULL THEN
    PERFORM pg_notify('distlock_locks', 'wake:' || v_first);
  END IF;
  RETURN CASE WHEN v_first IS NULL THEN 0 ELSE 1 END;
END
$distlock$;

INSERT INTO "distlock_locks_schema" AS s (id, version) VALUES (1, 3) ON CONFLICT (id) DO UPDATE SET version = GREATEST(s.version, 3);
