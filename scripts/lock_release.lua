-- lock_release.lua: release a token lock, or one hold of a reentrant lock, and
-- hand the lock to the next live waiter.
--
-- KEYS[1] lock key
-- KEYS[2] queue key (sorted set of waiters, score = wait deadline in Redis ms)
-- ARGV[1] token (token lock) or owner id (reentrant lock)
-- ARGV[2] wake channel (PUBLISH payload = the woken waiter's id)
-- ARGV[3] hand-off reservation in milliseconds
--
-- Returns -1 when the caller does not hold the lock (nothing is changed,
-- except that a hand-off reservation made for the caller is passed on),
-- 0 when the lock was released, and n > 0 when a reentrant lock still has n
-- holds of this owner.
--
-- Waking exactly one waiter (not all of them) keeps the Redis commands per
-- acquisition flat in the number of waiters. The lock key is set to a short
-- reservation for that waiter so a barging caller cannot starve it; a waiter
-- that is gone (PUBLISH reached nobody) is skipped.
local lock, queue = KEYS[1], KEYS[2]
local token, channel, handoff = ARGV[1], ARGV[2], ARGV[3]

local function wake()
  if redis.call('EXISTS', queue) == 0 then
    return
  end
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', queue, '-inf', '(' .. ms)
  for _ = 1, 16 do
    local head = redis.call('ZPOPMIN', queue)
    if #head == 0 then
      return
    end
    redis.call('SET', lock, 'stampede-handoff:' .. head[1], 'PX', handoff)
    if redis.call('PUBLISH', channel, head[1]) > 0 then
      return
    end
    redis.call('DEL', lock)
  end
end

local kind = redis.call('TYPE', lock).ok
if kind == 'string' then
  local v = redis.call('GET', lock)
  if v == 'stampede-handoff:' .. token then
    -- A reservation for a caller that got its lock elsewhere (Redlock):
    -- pass it on rather than let it block everyone until it expires.
    redis.call('DEL', lock)
    wake()
    return -1
  end
  if v ~= token then
    return -1
  end
elseif kind == 'hash' then
  if redis.call('HEXISTS', lock, token) == 0 then
    return -1
  end
  local holds = redis.call('HINCRBY', lock, token, -1)
  if holds > 0 then
    return holds
  end
else
  return -1
end
redis.call('DEL', lock)
wake()
return 0
