-- Extend the mutex or the writer: compare-and-PEXPIRE.
-- KEYS[1] the key; ARGV[1] owner token, ARGV[2] TTL in ms. Returns 1 if the key held our
-- token and got the new TTL, 0 otherwise.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
