-- lock_acquire.lua: try to take a token lock or one hold of a reentrant lock;
-- optionally join the waiter queue when busy. Package lock takes a free token
-- lock it will not wait for with a plain SET NX PX; this script serves every
-- other case (hand-off reservations, the waiter queue, reentrant holds).
--
-- KEYS[1] lock key   (string = token lock, hash = reentrant lock {owner: holds})
-- KEYS[2] queue key  (sorted set of waiters, score = wait deadline in Redis ms)
-- ARGV[1] token (token lock) or owner id (reentrant lock)
-- ARGV[2] lease in milliseconds (> 0)
-- ARGV[3] mode: "t" token lock, "r" reentrant lock
-- ARGV[4] wait in milliseconds: > 0 joins the queue when busy, 0 does not
-- ARGV[5] the caller's wake channel (Pub/Sub channel of its client)
--
-- A queue member is "<#channel>:<channel><token>": the release that pops it
-- knows where to publish and whom to reserve the lock for.
--
-- Fencing numbers are not minted here but by lock_fence.lua, when a holder
-- first asks for one.
--
-- Returns {1, fence, holds} when obtained: holds = 1 for a token lock, fence
-- = the number the reentrant owner already has (lock_fence.lua) or 0; and
-- {0, pttl, 0} when busy, pttl being the remaining lease of the holder (or of
-- a hand-off reservation made for another waiter).
local lock, queue = KEYS[1], KEYS[2]
local token, ttl, mode = ARGV[1], ARGV[2], ARGV[3]
local wait, channel = tonumber(ARGV[4]), ARGV[5]

local function obtained()
  if wait > 0 then
    -- Only a caller that waits can be in the queue.
    redis.call('ZREM', queue, #channel .. ':' .. channel .. token)
  end
  return {1, 0, 1}
end

-- Fast path of a token lock: free, or reserved for this caller by a release.
if mode == 't' then
  if redis.call('SET', lock, token, 'NX', 'PX', ttl) then
    return obtained()
  end
  local v = redis.pcall('GET', lock) -- a reentrant lock's hash fails the GET
  if v == 'stampede-handoff:' .. token then
    redis.call('SET', lock, token, 'PX', ttl)
    return obtained()
  end
else
  local kind = redis.call('TYPE', lock).ok
  local free = kind == 'none'
  if kind == 'string' and redis.call('GET', lock) == 'stampede-handoff:' .. token then
    redis.call('DEL', lock)
    free = true
  end
  if free then
    redis.call('HSET', lock, token, 1)
    redis.call('PEXPIRE', lock, ttl)
    return obtained()
  end
  if kind == 'hash' and redis.call('HEXISTS', lock, token) == 1 then
    -- Reentrant re-acquire: one hold more, same fencing number (if the
    -- owner has one yet).
    local holds = redis.call('HINCRBY', lock, token, 1)
    redis.call('PEXPIRE', lock, ttl)
    return {1, tonumber(redis.call('HGET', lock, '')) or 0, holds}
  end
end

if wait > 0 then
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('ZADD', queue, 'NX', ms + wait, #channel .. ':' .. channel .. token)
  if redis.call('PTTL', queue) < wait then
    redis.call('PEXPIRE', queue, wait)
  end
end
return {0, redis.call('PTTL', lock), 0}
