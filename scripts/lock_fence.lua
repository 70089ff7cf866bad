-- lock_fence.lua: mint the fencing number of a lock the caller holds, or
-- return the one its reentrant owner already has.
--
-- KEYS[1] lock key   (string = token lock, hash = reentrant lock {owner: holds})
-- KEYS[2] fence key  (counter; never decreases, floored by the Redis clock)
-- ARGV[1] token (token lock) or owner id (reentrant lock)
-- ARGV[2] fence retention in milliseconds (TTL of the fence key)
--
-- Returns the fence (> 0), or 0 when the caller does not hold the lock
-- (nothing is minted: a number is only ever minted while its holder holds
-- the lock, so numbers rise in the order of the holds that asked for one).
--
-- A reentrant owner keeps one number for all its holds: it is stored in the
-- lock's hash under the field "" (never an owner: empty owners are refused).
local lock, fence = KEYS[1], KEYS[2]
local token, keep = ARGV[1], ARGV[2]

local kind = redis.call('TYPE', lock).ok
if kind == 'string' and redis.call('GET', lock) == token then
  return mint(fence, keep)
end
if kind == 'hash' and redis.call('HEXISTS', lock, token) == 1 then
  local f = redis.call('HGET', lock, '')
  if f then
    return tonumber(f)
  end
  f = mint(fence, keep)
  redis.call('HSET', lock, '', string.format('%d', f))
  return f
end
return 0
