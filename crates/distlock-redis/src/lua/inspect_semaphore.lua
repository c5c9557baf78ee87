-- The live holders of a semaphore, in one consistent read.
-- KEYS[1] holders, KEYS[2] state hash. Returns {{owner, expiry, ...}, permits or false, now}
-- (expiry and now in ms of the server's clock).
--! holds
local now = now_ms()
return {
  redis.call('ZRANGEBYSCORE', KEYS[1], now + 1, '+inf', 'WITHSCORES'),
  redis.call('HGET', KEYS[2], 'permits'),
  now,
}
