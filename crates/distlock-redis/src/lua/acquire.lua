-- Acquire a hold of any kind: the mutex (fenced or not), a semaphore permit, a read or the
-- write lock, with or without a waiter to queue or record.
--
-- ARGV[1] kind: 'mutex', 'permit', 'read', 'upgradeable' or 'write'; ARGV[2] owner token
-- (for a permit and a reader, the hold's member: see member.rs); ARGV[3] TTL in
-- ms; ARGV[4] '1' fenced (KEYS[2] is the fencing counter: the semaphore's state hash), '0'
-- not (no counter key; grants report token 0: Redlock's mutex; the other kinds are always
-- fenced); ARGV[5] waiter id ('' or absent: none); ARGV[6] its stay in ms; ARGV[7] the end
-- of its stay in us of the client's clock, its score in the queue ('' or absent: scored by
-- the server's clock); ARGV[8] the semaphore's permits; ARGV[9] the permit hold's weight.
--
-- KEYS[1] the holds (the lock key, the semaphore's holders, the readers); then, if fenced,
-- the fencing counter (the semaphore's state hash); then the queue (the mutex's or the
-- semaphore's waiters, the waiting writers: passed when there is a waiter, and always for
-- the semaphore and the read-write lock); then the writer (read-write lock).
--
-- Replies {1, fencing token} acquired; {3, fencing token} the mutex acquired under the
-- waiter's id, which a release handed it to; {0, ms until a hold could free or -1, holder's
-- owner or nothing} held; {2, stored permits} for a semaphore whose live holders use
-- another count (nothing changed).
--
-- Each kind's code is a branch of its own, and the helpers it needs ('--! name' lines, see
-- lua/mod.rs) are defined inside it, where it needs them: Lua makes a closure of every
-- function definition it runs, on every call, so a path defines only what it calls.
local kind, owner, ttl = ARGV[1], ARGV[2], ARGV[3]
local fenced = ARGV[4] == '1'
local waiter, stay, client_score = ARGV[5] or '', ARGV[6], ARGV[7] or ''
local first_after_holds = fenced and 3 or 2
local queue, writer_key = KEYS[first_after_holds], KEYS[first_after_holds + 1]

if kind == 'mutex' then
  -- SET NX PX; a key already holding this owner token (the same attempt sent again after
  -- a broken connection: tokens are unique per attempt) is ours: its TTL is reset and the
  -- counter's current value, which the first run drew, is the token.
  if redis.call('SET', KEYS[1], owner, 'NX', 'PX', ttl) then
    if waiter ~= '' then
      redis.call('ZREM', queue, waiter)
    end
    if not fenced then
      return {1, 0}
    end
    return {1, redis.call('INCR', KEYS[2])}
  end
  --! holder
  local holder = holder_of(KEYS[1])
  if holder == owner then
    redis.call('PEXPIRE', KEYS[1], ttl)
    if waiter ~= '' then
      redis.call('ZREM', queue, waiter)
    end
    if not fenced then
      return {1, 0}
    end
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  if waiter ~= '' and holder == waiter then
    -- Handed to this waiter by a release (see grant_next), whose publish it has not taken
    -- up: the lock is its own, under its waiter id, for its TTL from now, with the token
    -- the release drew.
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('ZREM', queue, waiter)
    if not fenced then
      return {3, 0}
    end
    return {3, tonumber(redis.call('GET', KEYS[2]))}
  end
  if waiter ~= '' then
    --! now_us
    --! enqueue
    enqueue(queue, waiter, stay, client_score)
  end
  return {0, redis.call('PTTL', KEYS[1]), holder}
end

if kind == 'permit' then
  -- Drop expired holders; refuse if live holders were admitted with another count; admit
  -- if the weights of the live holds and this one's (ARGV[9]) add up to at most the permits
  -- (or this member is live: the same attempt sent again), else queue the waiter and report
  -- the earliest expiry. The owner argument is the hold's member: a hold of n > 1 permits is
  -- `<n>*<owner>` and weighs n, any other member 1 (see member.rs).
  --! holds
  local now = now_ms()
  local count = live(KEYS[1], now)
  local asked = tonumber(ARGV[8])
  local weight = tonumber(ARGV[9]) or 1
  if count > 0 then
    local stored = tonumber(redis.call('HGET', KEYS[2], 'permits'))
    if stored and stored ~= asked then
      return {2, stored}
    end
  end
  -- Every member weighs at least 1: the weights are summed only when they could fit.
  local admit = false
  if count + weight <= asked then
    local taken = weight
    if count > 0 then
      for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
        taken = taken + (tonumber(string.match(member, '^(%d+)%*')) or 1)
      end
    end
    admit = taken <= asked
  end
  if admit or redis.call('ZSCORE', KEYS[1], owner) then
    redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
    redis.call('HSET', KEYS[2], 'permits', asked)
    expire_with_last(KEYS[1])
    if waiter ~= '' then
      redis.call('ZREM', queue, waiter)
    end
    return {1, redis.call('HINCRBY', KEYS[2], 'fence', 1)}
  end
  if waiter ~= '' then
    --! now_us
    --! enqueue
    enqueue(queue, waiter, stay, '')
  end
  return {0, first_score(KEYS[1]) - now}
end

if kind == 'read' or kind == 'upgradeable' then
  -- Refused while a writer holds (its PTTL and owner) or a live waiting writer is
  -- recorded (when the last record ends); an upgradeable read (its member `u*<owner>`) also
  -- while another live upgradeable reader holds (its expiry and owner); else the reader
  -- joins.
  --! holds
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
    if kind == 'upgradeable' then
      local readers = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
      for i = 1, #readers, 2 do
        if string.sub(readers[i], 1, 2) == 'u*' then
          return {0, tonumber(readers[i + 1]) - now, string.sub(readers[i], 3)}
        end
      end
    end
  end
  redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
  expire_with_last(KEYS[1])
  return {1, redis.call('INCR', KEYS[2])}
end

if kind == 'write' then
  -- Won if no reader and no writer is live (or this owner is the writer), or if the one
  -- live reader is this owner's upgradeable read (`u*<owner>`): the upgrade, which takes
  -- that reader out as it sets the writer. Else the waiter is recorded as waiting until now
  -- + its stay (a record scored in ms that keeps new readers out, not a queue), and the
  -- writer's PTTL and owner, or the last other reader's expiry, reported.
  --! holds
  local now = now_ms()
  local readers = live(KEYS[1], now)
  live(queue, now)
  local writer = redis.call('GET', writer_key)
  local upgrade = 'u*' .. owner
  local upgrading = not writer and readers == 1 and redis.call('ZSCORE', KEYS[1], upgrade)
  if writer == owner or (not writer and readers == 0) or upgrading then
    if upgrading then
      redis.call('ZREM', KEYS[1], upgrade)
    end
    redis.call('SET', writer_key, owner, 'PX', ttl)
    if waiter ~= '' then
      redis.call('ZREM', queue, waiter)
    end
    return {1, redis.call('INCR', KEYS[2])}
  end
  if waiter ~= '' then
    redis.call('ZADD', queue, now + tonumber(stay), waiter)
    expire_with_last(queue)
  end
  if writer then
    return {0, redis.call('PTTL', writer_key), writer}
  end
  -- The latest of the last two readers that is not the upgrade's own.
  local last = redis.call('ZRANGE', KEYS[1], -2, -1, 'WITHSCORES')
  local expiry = last[#last - 1] ~= upgrade and last[#last] or last[2]
  return {0, tonumber(expiry) - now}
end

return redis.error_reply('distlock: unknown kind of hold ' .. tostring(kind))
