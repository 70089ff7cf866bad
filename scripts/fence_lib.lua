-- fence_lib.lua: the one fence-minting rule, shared by the lock and guard
-- scripts. scripts.go puts this chunk in front of every script that mints
-- (Redis Lua has no includes); it is never run alone.

-- mint returns a new fencing number for the counter key fence, kept for
-- keep milliseconds. The fence is max(counter + 1, Redis time in
-- microseconds): it keeps rising even when the counter is lost (restart
-- without persistence, failover to a replica that missed the last write), as
-- long as the Redis clock moves on.
local function mint(fence, keep)
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

-- mintable reports whether mint can count on from the counter fence
-- exactly: Lua numbers are doubles, so INCR's result above 2^53 comes back
-- rounded, and two holders could be handed one number. The Redis clock in
-- microseconds, which floors every fence, stays below 2^53 until the year
-- 2255: only foreign data puts a counter there. A value of another type
-- fails the GET, as it would fail INCR.
local function mintable(fence)
  local v = redis.call('GET', fence)
  return not v or (tonumber(v) or 0) < 9007199254740991
end
