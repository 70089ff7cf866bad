-- lock_refresh.lua: set the lease of a lock the caller holds (a token lock,
-- or one hold of a reentrant lock) to a new length from now.
--
-- KEYS[1] lock key (the layout of a reentrant lock is in lock_acquire.lua)
-- KEYS[2] fence key
-- ARGV[1] id: the token (token lock) or the hold's id (reentrant lock)
-- ARGV[2] new lease in milliseconds (> 0)
-- ARGV[3] fence retention in milliseconds
--
-- A reentrant hold's new deadline is its own: the lock's key then expires at
-- the latest deadline of the owner's live holds, so one hold's shorter lease
-- never cuts another's.
--
-- Returns 1 when set, 0 when the caller does not hold the lock (nothing is
-- changed: a lock or hold that is not ours, or whose deadline has come, is
-- never extended).
local lock, fence = KEYS[1], KEYS[2]
local id, ttl = ARGV[1], tonumber(ARGV[2])

local kind = redis.call('TYPE', lock).ok
if kind == 'string' then
  if redis.call('GET', lock) ~= id then
    return 0
  end
  redis.call('PEXPIRE', lock, ttl)
elseif kind == 'hash' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local mine = tonumber(redis.call('HGET', lock, 'hold:' .. id))
  if not mine or mine <= now then
    return 0
  end
  local deadline = now + ttl
  local all, dead, latest = redis.call('HGETALL', lock), {}, deadline
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 5) == 'hold:' and f ~= 'hold:' .. id then
      local d = tonumber(all[i + 1]) or 0
      if d > now then
        latest = math.max(latest, d)
      else
        dead[#dead + 1] = f
      end
    end
  end
  if #dead > 0 then
    hdel(lock, dead)
  end
  redis.call('HSET', lock, 'hold:' .. id, string.format('%d', deadline))
  redis.call('PEXPIRE', lock, latest - now)
else
  return 0
end
redis.call('PEXPIRE', fence, ARGV[3])
return 1
