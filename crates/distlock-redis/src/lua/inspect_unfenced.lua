-- The mutex's holder and its remaining TTL, in one consistent read (Redlock: no counter).
-- KEYS[1] lock key. Returns {owner or false, PTTL}.
--! holder
return {holder_of(KEYS[1]), redis.call('PTTL', KEYS[1])}
