-- guard_invalidate.lua: drop a cache entry and fence out every refresh that
-- started before, then wake the callers waiting for a fill.
--
-- KEYS[1] entry key
-- KEYS[2] lease key   (string: the fence of the holder)
-- KEYS[3] fence key   (counter; never decreases, floored by the Redis clock)
-- KEYS[4] waiters key (set of the notification channels of callers waiting for a fill)
-- KEYS[5] invalidation key (string: the fence minted here)
-- ARGV[1] hold in milliseconds (TTL of the fence and invalidation keys: the
--         longest a lease and the loads under it last)
-- ARGV[2] notification payload, PUBLISHed to every waiter channel
--
-- The lease is deleted so the next reader refreshes at once; the fill of a
-- refresh in flight is rejected by guard_fill.lua, as its fence is below the
-- one minted here.
--
-- A key with no entry, no lease and no fence counter has nothing to drop
-- and no fill to fence out (a fenced fill finds no counter and no lease of
-- its own, and is rejected): no name is written; waiters are still woken.
-- Returns {fence, foreign} (fence 0 when none was minted): the fence minted by this invalidation, and the
-- names ("fence", "w", joined by ",") whose foreign values (see
-- guard_read.lua) were dropped, or "".
local entry, lease, fence, waiters, inv = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local keep, msg = ARGV[1], ARGV[2]

if not tonumber(keep) or tonumber(keep) <= 0 then
  return redis.error_reply('ERR guard_invalidate: bad fence retention ' .. tostring(keep))
end

local foreign = {}
if redis.call('EXISTS', entry, lease, fence) == 0 then
  notify(waiters, msg, foreign)
  return {0, table.concat(foreign, ',')}
end
local f = guardmint(fence, keep, foreign)
redis.call('SET', inv, string.format('%d', f), 'PX', keep)
drop(entry)
redis.call('DEL', lease)
notify(waiters, msg, foreign)
return {f, table.concat(foreign, ',')}
