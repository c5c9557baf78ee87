-- The holds that can be many (semaphore permits, readers) and the waiting writers: sorted
-- sets scored by expiry in milliseconds of the server's clock.
-- now_ms(): the server's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- live(set, now): drops the expired members of set and counts the rest.
local function live(set, now)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  return redis.call('ZCARD', set)
end
-- first_score(set), last_score(set): the earliest and latest score, or nil.
local function first_score(set)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2]
  return first and tonumber(first)
end
local function last_score(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
  return last and tonumber(last)
end
-- expire_with_last(set): set expires with its latest member.
local function expire_with_last(set)
  local last = last_score(set)
  if last then
    redis.call('PEXPIREAT', set, last)
  end
end
