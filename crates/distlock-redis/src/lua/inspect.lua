-- The mutex's holder, its remaining TTL and the last fencing token, in one consistent read.
-- KEYS[1] lock key, KEYS[2] fencing counter. Returns {owner or false, PTTL, counter or false}.
--! holder
return {holder_of(KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
