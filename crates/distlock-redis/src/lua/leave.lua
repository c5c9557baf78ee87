-- A mutex's waiter leaves the queue (it gave up, or its outcome is unknown), giving back the
-- lock if a release handed it over; if the lock is free, it may have been woken without
-- trying, so the next waiter is woken in its place.
-- KEYS[1] lock key, KEYS[2] waiters; ARGV[1] waiter id, ARGV[2] release channel.
--! now_us
--! wake_next
redis.call('ZREM', KEYS[2], ARGV[1])
-- A release may have handed it the lock meanwhile (its id is then the owner): given back.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake_next(KEYS[2], ARGV[2])
end
return 0
