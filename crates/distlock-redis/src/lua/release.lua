-- Release a hold of any kind, owner-checked: compare-and-delete the mutex or the writer,
-- remove a live member (a permit, a reader); then wake or announce.
--
-- ARGV[1] kind: 'mutex', 'permit', 'read', 'upgradeable' or 'write'; ARGV[2] owner token
-- (for a permit and a reader, the hold's member: see member.rs); ARGV[3] the
-- channel ('' for the mutex: wake no one, as for the cleanup of a failed Redlock attempt,
-- whose minority grants nobody waits for); ARGV[4] the release marker's TTL in ms ('0': no
-- marker); ARGV[5] for a mutex whose release hands the lock to its first waiter, the
-- shortest claim in ms (absent: it wakes the waiter instead, as Redlock's masters do).
--
-- KEYS[1] the hold (the lock key, the semaphore's holders, the readers, the writer); KEYS[2]
-- the release marker (unused with no marker); KEYS[3] the queue (the mutex's waiters with a
-- channel; the semaphore's waiters); KEYS[4] the mutex's fencing counter, with a claim.
--
-- A mutex's release hands the lock to the first waiter of its queue, or wakes it; a hold of
-- n permits wakes the first n waiters of the semaphore's queue alone (n permits came free: up
-- to n waiters can take them); a reader's announces 'released' only when no live reader is
-- left (only that can let a writer in) or only an upgradeable one (its upgrade may wait); an
-- upgradeable reader's and the writer's always announce it. Returns 1 if the owner held it
-- (live) and it was removed
-- (then the marker is written), or held nothing but its marker says an earlier run of this
-- same request removed it; 0 otherwise (an expired member is removed too).
--
-- As in acquire.lua, each branch defines the helpers it calls where it calls them.
local kind, owner, channel, marker_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
--! release_marker

if kind == 'mutex' then
  if redis.pcall('GET', KEYS[1]) == owner then
    redis.call('DEL', KEYS[1])
    mark_released(KEYS[2], marker_ttl)
    if channel ~= '' then
      --! now_us
      if ARGV[5] then
        --! grant_next
        grant_next(KEYS[3], KEYS[1], KEYS[4], channel, ARGV[5])
      else
        --! wake_next
        wake_next(KEYS[3], channel)
      end
    end
    return 1
  end
  if released_before(KEYS[2], marker_ttl) then
    return 1
  end
  return 0
end

if kind == 'permit' or kind == 'read' or kind == 'upgradeable' then
  local score = redis.call('ZSCORE', KEYS[1], owner)
  if not score then
    if released_before(KEYS[2], marker_ttl) then
      return 1
    end
    return 0
  end
  redis.call('ZREM', KEYS[1], owner)
  --! holds
  local now = now_ms()
  if tonumber(score) <= now then
    return 0
  end
  mark_released(KEYS[2], marker_ttl)
  if kind == 'permit' then
    -- A hold of n permits (`<n>*<owner>`) frees n: the first n waiters are woken.
    local weight = tonumber(string.match(owner, '^(%d+)%*')) or 1
    --! now_us
    --! wake_next
    local wakes = 1
    if weight > 1 then
      wakes = math.min(weight, redis.call('ZCARD', KEYS[3]))
    end
    for _ = 1, wakes do
      wake_next(KEYS[3], channel)
    end
  else
    -- Announced when no reader is left (a writer may come in), when the upgradeable reader
    -- left (another may come in), or when only an upgradeable reader is left (its upgrade
    -- may be waiting).
    local left = live(KEYS[1], now)
    local last = left == 1 and redis.call('ZRANGE', KEYS[1], 0, 0)[1]
    if left == 0 or kind == 'upgradeable' or (last and string.sub(last, 1, 2) == 'u*') then
      redis.call(distlock_publish, channel, 'released')
    end
  end
  return 1
end

if kind == 'write' then
  if redis.call('GET', KEYS[1]) == owner then
    redis.call('DEL', KEYS[1])
    mark_released(KEYS[2], marker_ttl)
    redis.call(distlock_publish, channel, 'released')
    return 1
  end
  if released_before(KEYS[2], marker_ttl) then
    return 1
  end
  return 0
end

return redis.error_reply('distlock: unknown kind of hold ' .. tostring(kind))
