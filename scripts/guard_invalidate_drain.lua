-- guard_invalidate_drain.lua: drop one slice of the members of a tag that
-- guard_invalidate_tag.lua invalidated, and wake their waiters.
--
-- KEYS[1] the drained member set (KEYS[3] of guard_invalidate_tag.lua)
-- KEYS[2..] four names per member of this slice, each an entry name of a
--         key of the tag: entry, lease, fence, waiters
-- ARGV[1] how many members to return for the next slice
-- ARGV[2] the invalidation's time (the tag's invalidation key it wrote)
-- ARGV[3..] members of the set that are not entry names of the tag's keys
--         (foreign: removed from the set, never touched)
--
-- Each member's entry and lease are deleted (the tag's invalidation key
-- fences out their fills already), and so is its fence counter when no
-- fence was minted since the invalidation (the counter is floored by the
-- same clock); its waiters are woken with the entry's name; the member
-- leaves the set. The work is bounded by the
-- slice, so no call blocks Redis for long, and nothing adds to the set, so
-- draining ends.
--
-- Returns {n, foreign, members}: n the members left, foreign "w" or
-- "fence" when a foreign value was dropped, or "", and up to ARGV[1]
-- members.
local drain, slice = KEYS[1], tonumber(ARGV[1])
if not (slice and slice > 0 and slice % 1 == 0) then
  return redis.error_reply('ERR guard_invalidate_drain: bad slice ' .. tostring(ARGV[1]))
end
if (#KEYS - 1) % 4 ~= 0 then
  return redis.error_reply('ERR guard_invalidate_drain: keys come in fours after the first')
end
if not canon(ARGV[2], fencemax) then
  return redis.error_reply('ERR guard_invalidate_drain: bad time ' .. tostring(ARGV[2]))
end
if redis.call('TYPE', drain).ok ~= 'set' then
  return {0, '', {}}
end

local foreign = {}
for i = 2, #KEYS, 4 do
  local entry, lease, fence, waiters = KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3]
  drop(entry)
  redis.call('DEL', lease)
  local c = counter(fence, foreign)
  if c and less(c, ARGV[2]) then
    redis.call('DEL', fence)
  end
  notify(waiters, entry, foreign)
  redis.call('SREM', drain, entry)
end
for i = 3, #ARGV do
  redis.call('SREM', drain, ARGV[i])
end
return {redis.call('SCARD', drain), table.concat(foreign, ','), redis.call('SRANDMEMBER', drain, slice)}
