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
-- ARGV[6] the caller's wake channel (Pub/Sub channel of its client)
--
-- A queue member is "<#channel>:<channel><token>": the release that pops it
-- knows where to publish and whom to reserve the lock for.
--
-- Returns {1, fence, holds} when obtained (holds = 1 for a token lock) and
-- {0, pttl, 0} when busy, pttl being the remaining lease of the holder (or of
-- a hand-off reservation made for another waiter).
local lock, fence, queue = KEYS[1], KEYS[2], KEYS[3]
local token, ttl, mode = ARGV[1], ARGV[2], ARGV[3]
local wait, keep, channel = tonumber(ARGV[4]), ARGV[5], ARGV[6]

-- The fence is max(counter + 1, Redis time in microseconds): it keeps rising
-- even when the counter is lost (restart without persistence, failover to a
-- replica that missed the last write), as long as the Redis clock moves on.
local function mint()
  local now = redis.call('TIME')
  local f = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('GET', fence))
  if last and last >= f then
    f = last + 1
  end
  redis.call('SET', fence, string.format('%d', f), 'PX', keep)
  return f
end

local function obtained()
  if wait > 0 then
    -- Only a caller that waits can be in the queue.
    redis.call('ZREM', queue, #channel .. ':' .. channel .. token)
  end
  return {1, mint(), 1}
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
