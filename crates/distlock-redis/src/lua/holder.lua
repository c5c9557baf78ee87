-- holder_of(key): the key's value, or '<type>' for a key of another type (another
-- library's lock, such as Redisson's hash), which is then held by a foreign owner rather
-- than a WRONGTYPE error.
local function holder_of(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    return '<' .. redis.call('TYPE', key).ok .. '>'
  end
  return v
end
