-- enqueue(queue, waiter, stay, client_score): the waiter joins the queue (the mutex's or the
-- semaphore's waiters, a sorted set scored by the end of each waiter's stay in us) at the
-- back, for its stay (ms, a string), after the entries whose stay ended are dropped (so that
-- waiters that died do not pile up while the lock stays held); the queue expires with the
-- longest stay in it. Scored by the server's clock, or by client_score, the end of the stay
-- in us of the client's clock ('' for none: Redlock's, whose one attempt reaches its
-- masters in parallel, and waiters' attempts arrive in different orders at different
-- masters; with the client's score every master orders its queue alike, and a release wakes
-- the same waiter on all of them). Needs now_us.
local function enqueue(queue, waiter, stay, client_score)
  local stay_ms = tonumber(stay)
  local now, score
  if client_score ~= '' then
    now = tonumber(client_score) - stay_ms * 1000
    score = client_score
  else
    now = now_us()
    score = now + stay_ms * 1000
  end
  redis.call('ZREMRANGEBYSCORE', queue, '-inf', now)
  redis.call('ZADD', queue, score, waiter)
  if redis.call('PTTL', queue) < stay_ms then
    redis.call('PEXPIRE', queue, stay_ms)
  end
end
