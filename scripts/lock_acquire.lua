-- lock_acquire.lua: try to take a token lock or one hold of a reentrant lock,
-- minting a fencing number; optionally join the waiter queue when busy.
--
-- KEYS[1] lock key   (string = token lock, hash = reentrant lock {owner: holds})
-- KEYS[2] fence key  (counter; never decreases, floored by the Redis clock)
-- KEYS[3] queue key  (sorted set of waiters, score = wait deadline in Redis ms)
-- ARGV[1] token (token lock) or owner id (reentrant lock)
-- ARGV[2] lease in milliseconds (> 0)
-- ARGV[3] mode: "t" token lock, "r" reentrant lock
-- ARGV[4] wait in milliseconds: > 0 joins the queue when busy, 0 does not
-- ARGV[5] fence retention in milliseconds (TTL of the fence key)
--
-- Returns {1, fence, holds} when obtained (holds = 1 for a token lock) and
-- {0, pttl, 0} when busy, pttl being the remaining lease of the holder (or of
-- a hand-off reservation made for another waiter).
local lock, fence, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, mode = ARGV[1], ARGV[2], ARGV[3]
local wait, keep = tonumber(ARGV[4]), ARGV[5]

-- The fence is max(counter + 1, Redis time in microseconds): it keeps rising
-- even when the counter is lost (restart without persistence, failover to a
-- replica that missed the last write), as long as the Redis clock moves on.
local function mint()
  local now = redis.call('TIME')
  local floor = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local f = redis.call('INCR', fence)
  if f < floor then
    f = floor
    redis.call('SET', fence, string.format('%d', f))
  end
  redis.call('PEXPIRE', fence, keep)
  return f
end

local kind = redis.call('TYPE', lock).ok
local free = kind == 'none'
if kind == 'string' and redis.call('GET', lock) == 'stampede-handoff:' .. token then
  -- A release reserved the lock for this waiter.
  redis.call('DEL', lock)
  free = true
end

if free then
  if mode == 'r' then
    redis.call('HSET', lock, token, 1)
    redis.call('PEXPIRE', lock, ttl)
  else
    redis.call('SET', lock, token, 'PX', ttl)
  end
  if wait > 0 then
    -- Only a caller that waits can be in the queue.
    redis.call('ZREM', queue, token)
  end
  return {1, mint(), 1}
end

if mode == 'r' and kind == 'hash' and redis.call('HEXISTS', lock, token) == 1 then
  -- Reentrant re-acquire: one hold more, same fencing number.
  local holds = redis.call('HINCRBY', lock, token, 1)
  redis.call('PEXPIRE', lock, ttl)
  local f = redis.call('GET', fence)
  if f then
    redis.call('PEXPIRE', fence, keep)
    f = tonumber(f)
  else
    f = mint()
  end
  return {1, f, holds}
end

if wait > 0 then
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('ZADD', queue, 'NX', ms + wait, token)
  if redis.call('PTTL', queue) < wait then
    redis.call('PEXPIRE', queue, wait)
  end
end
return {0, redis.call('PTTL', lock), 0}
