-- Extend a member hold (a permit, a reader): a live member's expiry becomes now + TTL
-- (ZADD XX), and the set expires with its last member.
-- KEYS[1] the set; ARGV[1] owner token, ARGV[2] TTL in ms. Returns 1 if the owner held a
-- live member, 0 otherwise.
--! holds
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_with_last(KEYS[1])
return 1
