-- wake_next(waiters, channel): drops the queue entries whose stay ended, takes the first
-- remaining waiter out of the queue and publishes 'wake:<waiter>' on the channel. Nothing
-- is published when no one waits. Needs now_us.
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
