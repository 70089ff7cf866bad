-- guard_invalidate_tag.lua: invalidate every key of one hash tag at once,
-- in bounded time, and hand its members over to be dropped in slices
-- (guard_invalidate_drain.lua).
--
-- KEYS[1] the tag's member set (the entry names of its keys that were
--         written or hold a lease)
-- KEYS[2] the tag's invalidation key (string: Redis time in microseconds)
-- KEYS[3] a name of the tag's not in use (the caller makes it unique): the
--         members are moved there, to be drained
-- ARGV[1] how many members to return for the first slice
-- ARGV[2] the invalidation key's life in milliseconds when there is no
--         member set (the Group's windows: see below)
--
-- The invalidation key is set to the Redis time in microseconds first: from
-- then on every read of a key of the tag (guard_read.lua, the fast path,
-- the in-process tier) treats an entry written before it as missing, and
-- guard_fill.lua rejects a fill whose lease was minted before it (fences
-- are floored by the same clock). So the invalidation holds at once for
-- every member, old or new, however many there are; the slices only free
-- memory and wake the waiters sooner. It lives as long as the member set
-- would have: the set outlives every entry and every lease of its members.
--
-- With no member set (none was written, or it was lost: evicted, deleted
-- by hand) or a value of another type in its place (dropped and
-- reported), the invalidation key lives ARGV[2] milliseconds: long enough
-- for the entries the set may have named, when they have the Group's
-- windows. An existing invalidation key that lives longer is kept.
--
-- Returns {n, foreign, members, t}: n the members left to drain under
-- KEYS[3], foreign "tkeys" when a foreign value was dropped, or "", up to
-- ARGV[1] of the members, and the invalidation's time.
local tkeys, tinv, drain = KEYS[1], KEYS[2], KEYS[3]
local slice, hold = tonumber(ARGV[1]), tonumber(ARGV[2])
if not (slice and slice > 0 and slice % 1 == 0) then
  return redis.error_reply('ERR guard_invalidate_tag: bad slice ' .. tostring(ARGV[1]))
end
if not (hold and hold > 0 and hold % 1 == 0) then
  return redis.error_reply('ERR guard_invalidate_tag: bad hold ' .. tostring(ARGV[2]))
end

local kind = redis.call('TYPE', tkeys).ok
local life = hold
if kind == 'set' then
  life = math.max(redis.call('PTTL', tkeys), 1)
end
life = math.max(life, redis.call('PTTL', tinv))
local now = redis.call('TIME')
local t = string.format('%d', tonumber(now[1]) * 1000000 + tonumber(now[2]))
redis.call('SET', tinv, t, 'PX', life)
if kind == 'none' then
  return {0, '', {}, t}
elseif kind ~= 'set' then
  drop(tkeys)
  return {0, 'tkeys', {}, t}
end
redis.call('RENAME', tkeys, drain)
return {redis.call('SCARD', drain), '', redis.call('SRANDMEMBER', drain, slice), t}
