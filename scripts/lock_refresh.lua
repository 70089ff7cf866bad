-- lock_refresh.lua: extend the lease of a lock the caller holds.
--
-- KEYS[1] lock key
-- KEYS[2] fence key
-- ARGV[1] token (token lock) or owner id (reentrant lock)
-- ARGV[2] new lease in milliseconds (> 0)
-- ARGV[3] fence retention in milliseconds
--
-- Returns 1 when extended, 0 when the caller does not hold the lock (nothing
-- is changed: a lock that is not ours is never extended).
local lock, fence = KEYS[1], KEYS[2]
local token = ARGV[1]

local kind = redis.call('TYPE', lock).ok
local held = (kind == 'string' and redis.call('GET', lock) == token)
  or (kind == 'hash' and redis.call('HEXISTS', lock, token) == 1)
if not held then
  return 0
end
redis.call('PEXPIRE', lock, ARGV[2])
redis.call('PEXPIRE', fence, ARGV[3])
return 1
