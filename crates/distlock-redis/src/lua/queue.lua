-- The queues of waiters (the mutex's, the semaphore's): sorted sets of waiter ids scored by
-- the end of each waiter's stay in microseconds.
-- now_us(): the server's clock in microseconds.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- wake_next(waiters, channel): drops the entries whose stay ended, takes the first
-- remaining waiter out of the queue and publishes 'wake:<waiter>' on the channel. Nothing
-- is published when no one waits.
local function wake_next(waiters, channel)
  if redis.call('EXISTS', waiters) == 0 then
    return
  end
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now_us())
  local first = redis.call('ZRANGE', waiters, 0, 0)[1]
  if first then
    redis.call('ZREM', waiters, first)
    redis.call(distlock_publish, channel, 'wake:' .. first)
  end
end
