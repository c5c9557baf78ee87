-- Acquire a hold of any kind: the mutex (fenced or not), a semaphore permit, a read or the
-- write lock, with or without a waiter to queue or record.
--
-- ARGV[1] kind: 'mutex', 'permit', 'read' or 'write'; ARGV[2] owner token; ARGV[3] TTL in
-- ms; ARGV[4] '1' fenced (KEYS[2] is the fencing counter: the semaphore's state hash), '0'
-- not (no counter key; grants report token 0: Redlock's mutex; the other kinds are always
-- fenced); ARGV[5] waiter id ('' or absent: none); ARGV[6] its stay in ms; ARGV[7] the end
-- of its stay in us of the client's clock, its score in the queue ('' or absent: scored by
-- the server's clock); ARGV[8] the semaphore's permits.
--
-- KEYS[1] the holds (the lock key, the semaphore's holders, the readers); then, if fenced,
-- the fencing counter (the semaphore's state hash); then the queue (the mutex's or the
-- semaphore's waiters, the waiting writers: passed when there is a waiter, and always for
-- the semaphore and the read-write lock); then the writer (read-write lock).
--
-- Replies {1, fencing token} acquired; {0, ms until a hold could free or -1, holder's
-- owner or nothing} held; {2, stored permits} for a semaphore whose live holders use
-- another count (nothing changed).
local kind, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
local fenced = ARGV[4] == '1'
local waiter, stay, client_score = ARGV[5] or '', ARGV[6], ARGV[7] or ''
local first_after_holds = fenced and 3 or 2
local queue, writer_key = KEYS[first_after_holds], KEYS[first_after_holds + 1]

-- A new fencing token: the counter's next value (0 unfenced).
local function draw_token()
  if not fenced then
    return 0
  end
  if kind == 'permit' then
    return redis.call('HINCRBY', KEYS[2], 'fence', 1)
  end
  return redis.call('INCR', KEYS[2])
end

-- The waiter (if any) leaves the queue: its attempt won.
local function leave_queue()
  if waiter ~= '' then
    redis.call('ZREM', queue, waiter)
  end
end

-- The waiter joins the queue at the back, for its stay, after the entries whose stay ended
-- are dropped (so that waiters that died do not pile up while the lock stays held); the
-- queue expires with the longest stay in it. Scored by the server's clock, or by the
-- client's (Redlock: one attempt reaches its masters in parallel, and waiters' attempts
-- arrive in different orders at different masters; with the client's score every master
-- orders its queue alike, and a release wakes the same waiter on all of them).
local function enqueue()
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

-- SET NX PX; a key already holding this owner token (the same attempt sent again after a
-- broken connection: tokens are unique per attempt) is ours: its TTL is reset and the
-- counter's current value, which the first run drew, is the token.
local function mutex()
  if redis.call('SET', KEYS[1], owner, 'NX', 'PX', ttl) then
    leave_queue()
    return {1, draw_token()}
  end
  local holder = holder_of(KEYS[1])
  if holder == owner then
    redis.call('PEXPIRE', KEYS[1], ttl)
    leave_queue()
    if not fenced then
      return {1, 0}
    end
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  if waiter ~= '' then
    enqueue()
  end
  return {0, redis.call('PTTL', KEYS[1]), holder}
end

-- Drop expired holders; refuse if live holders were admitted with another count; admit if
-- fewer than the permits are live (or this owner is: the same attempt sent again), else
-- queue the waiter and report the earliest expiry.
local function permit()
  local now = now_ms()
  local count = live(KEYS[1], now)
  local asked = tonumber(ARGV[8])
  if count > 0 then
    local stored = tonumber(redis.call('HGET', KEYS[2], 'permits'))
    if stored and stored ~= asked then
      return {2, stored}
    end
  end
  if count < asked or redis.call('ZSCORE', KEYS[1], owner) then
    redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
    redis.call('HSET', KEYS[2], 'permits', asked)
    expire_with_last(KEYS[1])
    leave_queue()
    return {1, draw_token()}
  end
  if waiter ~= '' then
    enqueue()
  end
  return {0, first_score(KEYS[1]) - now}
end

-- Refused while a writer holds (its PTTL and owner) or a live waiting writer is recorded
-- (when the last record ends); else the reader joins.
local function read()
  local now = now_ms()
  live(KEYS[1], now)
  if not redis.call('ZSCORE', KEYS[1], owner) then
    local writer = redis.call('GET', writer_key)
    if writer then
      return {0, redis.call('PTTL', writer_key), writer}
    end
    if live(queue, now) > 0 then
      return {0, last_score(queue) - now}
    end
  end
  redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
  expire_with_last(KEYS[1])
  return {1, draw_token()}
end

-- Won if no reader and no writer is live (or this owner is the writer); else the waiter is
-- recorded as waiting until now + its stay (a record scored in ms that keeps new readers
-- out, not a queue), and the writer's PTTL and owner, or the last reader's expiry, reported.
local function write()
  local now = now_ms()
  local readers = live(KEYS[1], now)
  live(queue, now)
  local writer = redis.call('GET', writer_key)
  if writer == owner or (not writer and readers == 0) then
    redis.call('SET', writer_key, owner, 'PX', ttl)
    leave_queue()
    return {1, draw_token()}
  end
  if waiter ~= '' then
    redis.call('ZADD', queue, now + tonumber(stay), waiter)
    expire_with_last(queue)
  end
  if writer then
    return {0, redis.call('PTTL', writer_key), writer}
  end
  return {0, last_score(KEYS[1]) - now}
end

if kind == 'mutex' then
  return mutex()
elseif kind == 'permit' then
  return permit()
elseif kind == 'read' then
  return read()
elseif kind == 'write' then
  return write()
end
return redis.error_reply('distlock: unknown kind of hold ' .. tostring(kind))
