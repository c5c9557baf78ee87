-- grant_next(waiters, lock, fence, channel, claim_ms): drops the queue entries whose stay
-- ended and takes the first remaining waiter out of the queue. A waiter whose id is an owner
-- token (36 characters: this version's waiters) is handed the lock: the lock key holds its
-- id for a claim of claim_ms (a string), or until its stay would have ended if that is later
-- (so the claim ends no earlier than the waiter's last attempt + the longer of the two); its
-- first renewal lengthens it to its TTL, and a waiter that died holds the lock for the claim
-- only. A fencing token is drawn and 'grant:<waiter>:<token>:<claim in ms>' is published,
-- on the waiter's client's channel (see waiter_channel).
-- Any other waiter (a client of a version before the handoff) is woken to try itself
-- ('wake:<waiter>'). Nothing is published when no one waits. Needs now_us.
--! waiter_channel
local function grant_next(waiters, lock, fence, channel, claim_ms)
  if redis.call('EXISTS', waiters) == 0 then
    return
  end
  local now = now_us()
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
  local first = redis.call('ZRANGE', waiters, 0, 0, 'WITHSCORES')
  local waiter = first[1]
  if not waiter then
    return
  end
  redis.call('ZREM', waiters, waiter)
  -- The rest of its stay rounded up: the claim ends no earlier than the waiter counts on.
  local claim = math.max(math.ceil((tonumber(first[2]) - now) / 1000), tonumber(claim_ms))
  if string.len(waiter) == 36 and claim > 0 then
    redis.call('SET', lock, waiter, 'PX', claim)
    local token = redis.call('INCR', fence)
    redis.call(distlock_publish, waiter_channel(channel, waiter),
      'grant:' .. waiter .. ':' .. token .. ':' .. claim)
  else
    redis.call(distlock_publish, channel, 'wake:' .. waiter)
  end
end
