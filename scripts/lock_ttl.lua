-- lock_ttl.lua: remaining lease of a lock the caller holds.
--
-- KEYS[1] lock key
-- ARGV[1] token (token lock) or owner id (reentrant lock)
--
-- Returns the remaining lease in milliseconds, or -3 when the caller does not
-- hold the lock.
local lock, token = KEYS[1], ARGV[1]

local kind = redis.call('TYPE', lock).ok
if (kind == 'string' and redis.call('GET', lock) == token)
  or (kind == 'hash' and redis.call('HEXISTS', lock, token) == 1) then
  return redis.call('PTTL', lock)
end
return -3
