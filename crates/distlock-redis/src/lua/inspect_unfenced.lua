-- The mutex's holder, its remaining TTL and the holder's note, in one consistent read
-- (Redlock: no counter). KEYS[1] lock key, KEYS[2] the holder's note. Returns
-- {owner or false, PTTL, note record or false}.
--! holder
return {holder_of(KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
