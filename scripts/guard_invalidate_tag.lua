-- guard_invalidate_tag.lua: drop the entries of every key of one hash tag
-- that was written, fence out every refresh of them that started before,
-- fence out the keys of the tag not written yet, and wake the callers
-- waiting for a fill of any of them.
--
-- KEYS[1] the tag's member set (the entry names of its keys that were written)
-- KEYS[2] the tag's invalidation key (string: Redis time in microseconds)
-- KEYS[3..] five names per member, in the order of guard_invalidate.lua:
--         entry, lease, fence, waiters, invalidation
-- ARGV[1] fence retention in milliseconds (TTL of the fence, invalidation
--         and tag invalidation keys)
--
-- The caller read the member set first (SMEMBERS) to name every key here
-- (the members that are entry names of the tag's keys: see below); if such
-- a member was added since, nothing is changed and {-1} is returned: the
-- caller reads the set again and retries.
-- A value of another type under the member set, or foreign data under a
-- member's names, is dropped and reported, as guard_invalidate.lua does. Otherwise every member is
-- invalidated as guard_invalidate.lua does (a fence minted, the
-- invalidation key set, entry and lease deleted, waiters woken with the
-- entry's name), the tag's invalidation key is set to the Redis time in
-- microseconds (guard_fill.lua rejects a fill of any key of the tag whose
-- lease was minted before: fences are floored by the same clock), and the
-- member set is deleted. Returns {n, foreign}: n the members invalidated
-- (-1 for a retry), foreign the names ("tkeys", "fence"...) whose foreign
-- values were dropped, or "".
local tkeys, tinv, keep = KEYS[1], KEYS[2], ARGV[1]
if not tonumber(keep) or tonumber(keep) <= 0 then
  return redis.error_reply('ERR guard_invalidate_tag: bad fence retention ' .. tostring(keep))
end
if (#KEYS - 2) % 5 ~= 0 then
  return redis.error_reply('ERR guard_invalidate_tag: keys come in fives after the first two')
end

local foreign = {}
local declared = {}
for i = 3, #KEYS, 5 do
  declared[KEYS[i]] = true
end
-- The entry names of the tag's keys begin with the tag's base name and a
-- "/"; a member that does not is foreign (it may name a key of the user's,
-- or of another slot) and is never touched.
local own = string.sub(tkeys, 1, #tkeys - #':tkeys') .. '/'
local kind = redis.call('TYPE', tkeys).ok
if kind == 'set' then
  local stranger = false
  for _, m in ipairs(redis.call('SMEMBERS', tkeys)) do
    if string.sub(m, 1, #own) ~= own then
      stranger = true
    elseif not declared[m] then
      return {-1, ''}
    end
  end
  if stranger then
    table.insert(foreign, 'tkeys')
  end
elseif kind ~= 'none' then
  table.insert(foreign, 'tkeys')
end

local t = redis.call('TIME')
redis.call('SET', tinv, string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), 'PX', keep)
local n = 0
for i = 3, #KEYS, 5 do
  local entry, lease, fence, waiters, inv = KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], KEYS[i + 4]
  local f = guardmint(fence, keep, foreign)
  redis.call('SET', inv, string.format('%d', f), 'PX', keep)
  redis.call('DEL', entry, lease)
  notify(waiters, entry, foreign)
  n = n + 1
end
redis.call('DEL', tkeys)
return {n, table.concat(foreign, ',')}
