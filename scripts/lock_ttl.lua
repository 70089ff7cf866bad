-- lock_ttl.lua: remaining lease of a lock the caller holds.
--
-- KEYS[1] lock key (the layout of a reentrant lock is in lock_acquire.lua)
-- ARGV[1] id: the token (token lock) or the hold's id (reentrant lock)
--
-- Returns the remaining lease in milliseconds (a reentrant hold's own, not
-- the lock's), or -3 when the caller does not hold the lock.
local lock, id = KEYS[1], ARGV[1]

local kind = redis.call('TYPE', lock).ok
if kind == 'string' and redis.call('GET', lock) == id then
  return redis.call('PTTL', lock)
end
if kind == 'hash' then
  local mine = tonumber(redis.call('HGET', lock, 'hold:' .. id))
  if mine then
    local t = redis.call('TIME')
    local left = mine - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    if left > 0 then
      return left
    end
  end
end
return -3
