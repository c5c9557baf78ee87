-- The release marker (on a cluster): mark_released(marker, ttl) records, for ttl ms, that
-- this request (its nonce) deleted the hold; released_before(marker, ttl) tells whether this
-- same request did so in an earlier run (sent again by the cluster client). A ttl of '0'
-- (one server, whose client sees its own resends) turns both off.
local function mark_released(marker, ttl)
  if ttl ~= '0' then
    redis.call('SET', marker, distlock_nonce, 'PX', ttl)
  end
end
local function released_before(marker, ttl)
  return ttl ~= '0' and redis.call('GET', marker) == distlock_nonce
end
