-- A waiting writer withdraws: its record goes; if that leaves no live waiting writer and no
-- writer, readers may come in, so it is announced.
-- KEYS[1] waiting writers, KEYS[2] writer; ARGV[1] waiter id, ARGV[2] channel. Returns 1 if
-- the waiter was recorded.
--! holds
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if live(KEYS[1], now_ms()) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call(distlock_publish, ARGV[2], 'released')
end
return 1
