-- lock_acquire.lua: try to take a token lock or one hold of a reentrant lock;
-- optionally join the waiter queue when busy. Package lock takes a free token
-- lock it will not wait for with a plain SET NX PX; this script serves every
-- other case (hand-off reservations, the waiter queue, reentrant holds).
--
-- KEYS[1] lock key   (string = token lock; hash = reentrant lock, see below)
-- KEYS[2] queue key  (sorted set of waiters, score = wait deadline in Redis ms)
-- ARGV[1] id: the token (token lock) or the new hold's id (reentrant lock),
--         random and new for each attempt (a call the client retries after
--         a lost reply sends the same id and finds its own grant)
-- ARGV[2] lease in milliseconds (> 0)
-- ARGV[3] mode: "t" token lock, "r" reentrant lock
-- ARGV[4] wait in milliseconds: > 0 joins the queue when busy, 0 does not
-- ARGV[5] the caller's wake channel (Pub/Sub channel of its client)
-- ARGV[6] the caller's waiter id (random, one per waiting call; "" when
--         it does not wait): its queue member and hand-off reservation
-- ARGV[7] owner id (mode "r" only; never empty)
--
-- A reentrant lock is a hash of one owner's holds, each with its own lease:
--
--   owner        the owner id
--   hold:<id>    deadline of one hold, in Redis milliseconds (TIME)
--   ""           the owner's fencing number, once minted (lock_fence.lua)
--
-- A hold whose deadline has come is dead: it keeps nobody out and the
-- scripts that meet it delete it. The key expires at the latest live
-- deadline (set with PEXPIRE, relative to TIME: PEXPIREAT would need one
-- ACL permission more), so it is gone when the last hold ends, and with it
-- the owner's fencing number: the next owner mints a new one. A hash
-- without an owner field (not written by this script) is treated as held
-- by someone else, never pruned.
--
-- A queue member is "<#channel>:<channel><waiter>": the release that pops
-- it knows where to publish and whom to reserve the lock for.
--
-- Fencing numbers are not minted here but by lock_fence.lua, when a holder
-- first asks for one.
--
-- Returns {1, fence, holds} when obtained: holds = 1 for a token lock, else
-- the owner's live holds including the new one; fence = the number the
-- reentrant owner already has, or 0. Returns {0, pttl, 0} when busy, pttl
-- being the remaining lease of the holder (its latest hold for a reentrant
-- lock; of a hand-off reservation made for another waiter).
local lock, queue = KEYS[1], KEYS[2]
local id, ttl, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local wait, channel, waiter = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local reserved = waiter ~= '' and 'stampede-handoff:' .. waiter

local function obtained(fence, holds)
  if wait > 0 then
    -- Only a caller that waits can be in the queue. A value of another
    -- type under its name (not written here) holds no waiter: it fails
    -- the ZREM, and the lock just set stays taken, not half done.
    redis.pcall('ZREM', queue, #channel .. ':' .. channel .. waiter)
  end
  return {1, fence, holds}
end

if mode == 't' then
  -- Fast path of a token lock: free, or reserved for this caller by a
  -- release, or already ours (this call's first run, retried by the client
  -- after a lost reply).
  if redis.call('SET', lock, id, 'NX', 'PX', ttl) then
    return obtained(0, 1)
  end
  local v = redis.pcall('GET', lock) -- a reentrant lock's hash fails the GET
  othertype(v) -- anything else raised: a refused GET is not a busy lock
  if v == reserved or v == id then
    redis.call('SET', lock, id, 'PX', ttl)
    return obtained(0, 1)
  end
else
  local owner = ARGV[7]
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local deadline = now + ttl
  local kind = redis.call('TYPE', lock).ok
  if kind == 'string' and redis.call('GET', lock) == reserved then
    redis.call('DEL', lock)
    kind = 'none'
  end
  local holder, live, latest, fence = nil, 0, 0, 0
  if kind == 'hash' then
    local all, dead = redis.call('HGETALL', lock), {}
    for i = 1, #all, 2 do
      local f, v = all[i], all[i + 1]
      if f == 'owner' then
        holder = v
      elseif f == '' then
        fence = tonumber(v) or 0
      elseif string.sub(f, 1, 5) == 'hold:' and f ~= 'hold:' .. id then
        local d = tonumber(v) or 0
        if d > now then
          live = live + 1
          latest = math.max(latest, d)
        else
          dead[#dead + 1] = f
        end
      end
    end
    if holder and live == 0 then
      -- Every hold of the last owner ended: the lock is free.
      redis.call('DEL', lock)
      kind = 'none'
    elseif holder and #dead > 0 then
      -- Only a hash this script wrote is pruned: without an owner field,
      -- "hold:" fields are someone else's, whatever their values.
      hdel(lock, dead)
    end
  end
  if kind == 'none' then
    redis.call('HSET', lock, 'owner', owner, 'hold:' .. id, string.format('%d', deadline))
    redis.call('PEXPIRE', lock, ttl)
    return obtained(0, 1)
  end
  if kind == 'hash' and holder == owner then
    -- Reentrant re-acquire: one hold more with its own lease, the owner's
    -- fencing number (if it has one yet). Setting the field again is what
    -- a retried call does: still one hold.
    redis.call('HSET', lock, 'hold:' .. id, string.format('%d', deadline))
    redis.call('PEXPIRE', lock, math.max(latest, deadline) - now)
    return obtained(fence, live + 1)
  end
end

if wait > 0 then
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('ZADD', queue, 'NX', ms + wait, #channel .. ':' .. channel .. waiter)
  if redis.call('PTTL', queue) < wait then
    redis.call('PEXPIRE', queue, wait)
  end
end
return {0, redis.call('PTTL', lock), 0}
