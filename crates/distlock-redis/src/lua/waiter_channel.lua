-- waiter_channel(channel, waiter): where a message naming a waiter of the object whose
-- channel is `channel` is published. A waiter id that is a version-8 UUID (36 characters,
-- '8' at the 15th) is a RedisLock waiter's, whose first 8 characters are its client's tag:
-- its client's channel, '<channel>\255<tag>', which only that client listens on (in the
-- channel's hash slot: its '{...}' tag comes first). Any other waiter (a client of an earlier
-- version, Redlock's, a semaphore's): the object's channel.
local function waiter_channel(channel, waiter)
  if string.len(waiter) == 36 and string.sub(waiter, 15, 15) == '8' then
    return channel .. '\255' .. string.sub(waiter, 1, 8)
  end
  return channel
end
