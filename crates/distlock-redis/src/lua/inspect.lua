-- The mutex's holder, its remaining TTL and the last fencing token, in one consistent read.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] the holder's note. Returns
-- {owner or false, PTTL, counter or false, note record or false}.
--! holder
return {holder_of(KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3])}
