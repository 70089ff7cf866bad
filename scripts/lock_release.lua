-- lock_release.lua: release a token lock, or one hold of a reentrant lock, and
-- hand the lock to the next live waiter; or, for a waiter that gives up,
-- leave the wait queue.
--
-- KEYS[1] lock key (the layout of a reentrant lock is in lock_acquire.lua)
-- KEYS[2] queue key (sorted set of waiters, score = wait deadline in Redis ms;
--         member "<#channel>:<channel><waiter>", see lock_acquire.lua)
-- ARGV[1] id: the token (token lock), the hold's id (reentrant lock), or
--         the waiter id the caller queued with (mode "l")
-- ARGV[2] mode: "t" release a token lock, "r" release one hold of a
--         reentrant lock, "l" leave the queue (the caller's waiting ended)
-- ARGV[3] hand-off reservation in milliseconds
-- ARGV[4] "1" when a PUBLISH that reached nobody means the waiter is gone
--         (a standalone server); "0" on Redis Cluster, where PUBLISH counts
--         only the receivers on the node that runs the script
-- ARGV[5] the caller's wake channel (mode "l" only; omitted otherwise)
--
-- Returns -1 when the caller does not hold the lock (nothing is changed,
-- except that mode "l" leaves the queue and passes on a hand-off
-- reservation made for the waiter): a token lock with another token, a hold that
-- was released or whose deadline has come. Returns 0 when the lock was
-- released, and n > 0 when a reentrant lock still has n live holds of this
-- owner; its key then expires at the latest of their deadlines.
--
-- Waking exactly one waiter (not all of them) keeps the Redis commands per
-- acquisition flat in the number of waiters. The lock key is set to a short
-- reservation for that waiter so a barging caller cannot starve it.
local lock, queue = KEYS[1], KEYS[2]
local token, mode = ARGV[1], ARGV[2]

-- The common case first, before anything else is set up: a token lock
-- released by its holder, with nobody waiting.
local v = redis.pcall('GET', lock) -- fails on a reentrant lock's hash
othertype(v) -- anything else raised: a refused GET is not a lost lock
local released = false
if mode == 't' and v == token then
  redis.call('DEL', lock)
  if redis.call('EXISTS', queue) == 0 then
    return 0
  end
  released = true
end

local handoff, trust = ARGV[3], ARGV[4] == '1'

-- wake reserves the lock for the first live waiter and wakes it. A value
-- of another type under the queue's name (not written by these scripts)
-- holds no waiter: it is left alone, as an empty queue, so that a release
-- is not failed half done (a script's error does not undo its writes).
local function wake()
  if redis.call('TYPE', queue).ok ~= 'zset' then
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
    local n, rest = string.match(head[1], '^(%d+):(.*)$')
    if n then
      n = tonumber(n)
      local channel, waiter = string.sub(rest, 1, n), string.sub(rest, n + 1)
      redis.call('SET', lock, 'stampede-handoff:' .. waiter, 'PX', handoff)
      if redis.call('PUBLISH', channel, waiter) > 0 or not trust then
        return
      end
      redis.call('DEL', lock)
    end
  end
end

if released then
  wake()
  return 0
end
if mode == 'l' then
  local channel = ARGV[5]
  redis.pcall('ZREM', queue, #channel .. ':' .. channel .. token) -- see wake
end

if mode == 'l' and v == 'stampede-handoff:' .. token then
  -- A reservation for a waiter that stopped waiting, or that got its lock
  -- on other masters (Redlock): pass it on rather than let it block
  -- everyone until it expires.
  redis.call('DEL', lock)
  wake()
  return -1
end
if mode == 't' then
  return -1 -- not ours (ours was released above)
elseif mode == 'r' then
  if redis.call('TYPE', lock).ok ~= 'hash' then
    return -1
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local mine = tonumber(redis.call('HGET', lock, 'hold:' .. token))
  if not mine or mine <= now then
    return -1 -- released, or ended: it keeps nobody out, and changes nothing
  end
  local all, dead = redis.call('HGETALL', lock), {'hold:' .. token}
  local live, latest = 0, 0
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 5) == 'hold:' and f ~= 'hold:' .. token then
      local d = tonumber(all[i + 1]) or 0
      if d > now then
        live = live + 1
        latest = math.max(latest, d)
      else
        dead[#dead + 1] = f
      end
    end
  end
  if live > 0 then
    hdel(lock, dead)
    redis.call('PEXPIRE', lock, latest - now)
    return live
  end
else
  return -1
end
redis.call('DEL', lock)
wake()
return 0
