-- A semaphore's waiter leaves the queue (its wait ended without a permit); if a permit is
-- free, it may have been woken without trying, so the next waiter is woken in its place.
-- KEYS[1] holders, KEYS[2] state hash, KEYS[3] waiters; ARGV[1] waiter id, ARGV[2] channel.
--! now_us
--! wake_next
--! holds
redis.call('ZREM', KEYS[3], ARGV[1])
local count = live(KEYS[1], now_ms())
local permits = tonumber(redis.call('HGET', KEYS[2], 'permits'))
if count == 0 or (permits and count < permits) then
  wake_next(KEYS[3], ARGV[2])
end
return 0
