-- lock_fence.lua: mint the fencing number of a lock the caller holds, or
-- return the one its reentrant owner already has.
--
-- KEYS[1] lock key   (the layout of a reentrant lock is in lock_acquire.lua)
-- KEYS[2] fence key  (counter; never decreases, floored by the Redis clock)
-- ARGV[1] id: the token (token lock) or the hold's id (reentrant lock)
-- ARGV[2] fence retention in milliseconds (TTL of the fence key)
-- ARGV[3] optional, reentrant lock only: the owner's number as the client
--         settled it over a quorum of Redlock masters (the largest they
--         gave). The number stored in the hash, and the fence counter, are
--         raised to it (never lowered) and nothing is minted: every master
--         then keeps the number the holds of the owner report.
--
-- Returns the fence (> 0), or 0 when the caller does not hold the lock
-- (nothing is minted: a number is only ever minted while its holder holds
-- the lock, so numbers rise in the order of the holds that asked for one),
-- or an error, changing nothing, when the counter is at 2^53-1 or beyond
-- (see mintable in fence_lib.lua).
--
-- A reentrant owner keeps one number for all its holds while any of them
-- lives: it is stored in the lock's hash under the field "" and goes with
-- the key when the owner's last hold ends.
local lock, fence = KEYS[1], KEYS[2]
local id, keep, raise = ARGV[1], ARGV[2], tonumber(ARGV[3])

local kind = redis.call('TYPE', lock).ok
local function beyond()
  return redis.error_reply('ERR lock_fence: the fence counter ' .. fence ..
    ' is at 2^53-1 or beyond, where Lua cannot count it on exactly (not a number this package minted): delete it or set it lower')
end

if kind == 'string' and redis.call('GET', lock) == id then
  if not mintable(fence) then
    return beyond()
  end
  return mint(fence, keep)
end
if kind == 'hash' then
  local mine = tonumber(redis.call('HGET', lock, 'hold:' .. id))
  local t = redis.call('TIME')
  if not mine or mine <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return 0
  end
  local f = tonumber(redis.call('HGET', lock, ''))
  if raise then
    if f and f >= raise then
      return f
    end
    redis.call('HSET', lock, '', string.format('%d', raise))
    if (tonumber(redis.call('GET', fence)) or 0) < raise then
      redis.call('SET', fence, string.format('%d', raise))
    end
    redis.call('PEXPIRE', fence, keep)
    return raise
  end
  if f then
    return f
  end
  if not mintable(fence) then
    return beyond()
  end
  f = mint(fence, keep)
  redis.call('HSET', lock, '', string.format('%d', f))
  return f
end
return 0
