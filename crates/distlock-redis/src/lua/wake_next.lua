-- wake_next(waiters, channel): drops the queue entries whose stay ended, takes the first
-- remaining waiter out of the queue and publishes 'wake:<waiter>' on the channel (on the
-- waiter's client's channel beside it, for a RedisLock waiter: see waiter_channel). Nothing
-- is published when no one waits. Needs now_us.
--! waiter_channel
local function wake_next(waiters, channel)
  if redis.call('EXISTS', waiters) == 0 then
    return
  end
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now_us())
  local first = redis.call('ZRANGE', waiters, 0, 0)[1]
  if first then
    redis.call('ZREM', waiters, first)
    redis.call(distlock_publish, waiter_channel(channel, first), 'wake:' .. first)
  end
end
