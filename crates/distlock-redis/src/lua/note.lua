-- A mutex holder leaves a note beside its hold, if it still holds the lock.
-- KEYS[1] lock key, KEYS[2] note key; ARGV[1] owner, ARGV[2] note. Returns 1 if stored, else 0.
--! holder
if holder_of(KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1] .. '\n' .. ARGV[2])
return 1
