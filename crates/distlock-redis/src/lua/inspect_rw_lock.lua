-- The live holders of a read-write lock, in one consistent read.
-- KEYS[1] readers, KEYS[2] writer. Returns {{owner, expiry, ...}, writer or false, writer's
-- PTTL, now}.
--! holds
local now = now_ms()
return {
  redis.call('ZRANGEBYSCORE', KEYS[1], now + 1, '+inf', 'WITHSCORES'),
  redis.call('GET', KEYS[2]),
  redis.call('PTTL', KEYS[2]),
  now,
}
