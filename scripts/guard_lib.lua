-- guard_lib.lua: functions shared by the guard scripts. scripts.go puts this
-- chunk in front of every guard script, after fence_lib.lua (Redis Lua has
-- no includes); it is never run alone.

-- nowms returns the Redis clock in milliseconds.
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- drop deletes name, which may hold a large value the guard did not write
-- (a set of millions of members under a key's name): UNLINK frees it off
-- Redis's main thread, so no client waits for it. An ACL that grants DEL
-- and not UNLINK (the user docs/security.md gave before) gets DEL.
local function drop(name)
  local r = redis.pcall('UNLINK', name)
  if type(r) == 'table' and r.err then
    redis.call('DEL', name)
  end
end

-- int reports whether the decimal string s is canonical (no leading zero)
-- and at most max (a decimal string).
local function int(s, max)
  return #s <= #max and (#s == 1 or s:byte(1) ~= 48) and (#s < #max or s <= max)
end

-- fencemax is the largest fence the guard accepts (2^53): Lua numbers are
-- doubles, and above it mint could hand out one fence twice. The Redis
-- clock in microseconds, which floors every fence, stays below it until the
-- year 2255.
local fencemax = '9007199254740992'

-- canon reports whether s is a string holding a canonical decimal (digits,
-- no leading zero) of at most max.
local function canon(s, max)
  return type(s) == 'string' and string.match(s, '^%d+$') ~= nil and int(s, max)
end

-- less compares two canonical decimal strings exactly (no float rounding).
local function less(a, b)
  return #a < #b or (#a == #b and a < b)
end

-- getstr returns the string under name, or false when there is none. A
-- value of another type was not written by the guard: it is deleted and
-- name is added to the list foreign.
local function getstr(name, what, foreign)
  local v = redis.pcall('GET', name)
  if othertype(v) then
    drop(name)
    table.insert(foreign, what)
    return false
  end
  return v
end

-- counter returns the fence counter under name (a decimal string), or
-- false when there is none. A counter the guard did not write (another
-- type, not a canonical decimal, above fencemax: INCR would fail on it, or
-- its fences would not count exactly) is deleted and reported in foreign:
-- the next fence is then floored by the Redis clock, as after a lost
-- counter.
local function counter(name, foreign)
  local v = getstr(name, 'fence', foreign)
  if v and not canon(v, fencemax) then
    drop(name)
    table.insert(foreign, 'fence')
    return false
  end
  return v
end

-- taginv returns a tag's invalidation time under name (Redis time in µs,
-- a decimal string), or false when there is none. One the guard did not
-- write (another type, not a canonical decimal, no TTL: every one
-- guard_invalidate_tag.lua writes expires) is deleted and reported in
-- foreign as "tinv".
local function taginv(name, foreign)
  local t = getstr(name, 'tinv', foreign)
  if t and (not canon(t, fencemax) or redis.call('PTTL', name) == -1) then
    drop(name)
    table.insert(foreign, 'tinv')
    return false
  end
  return t
end

-- guardmint is mint (fence_lib.lua) on a counter checked first: foreign
-- data under the counter's name never fails the script.
local function guardmint(name, keep, foreign)
  counter(name, foreign)
  return mint(name, keep)
end

-- parse applies the rules of decodeEntry (guard/entry.go) to an entry whose
-- first bytes (at least 128, or all) are v and whose length is n; it returns
-- the fresh_until, fence and flags fields (strings) of a valid v1 entry,
-- then its written field, the length of its header and its stale_until
-- field, or nil.
local function parse(v, n)
  if not v then
    return nil
  end
  local h, fu, su, w, us, f, fl = string.match(string.sub(v, 1, 128),
    '^(~1,(%d+),(%d+),(%d+),(%d+),(%d+),(%l*)\n)')
  if not h then
    return nil
  end
  local max = '9223372036854775807'
  if not (int(fu, max) and int(su, max) and int(w, max) and int(f, max)
      and int(us, '9223372036854775')) then
    return nil
  end
  if #su < #fu or (#su == #fu and su < fu) then
    return nil
  end
  if not (fl == '' or fl == 'e' or fl == 'r'
      or ((fl == 'n' or fl == 'f' or fl == 'p' or fl == 'o') and n == #h)) then
    return nil
  end
  return fu, f, fl, w, #h, su
end

-- maxwaiters bounds a waiters set: one channel per Group waiting, so
-- about a fleet's nodes at most. A larger set was not made by the guard;
-- publishing to each of its members would hold Redis for every client.
local maxwaiters = 10000

-- notify publishes msg to every channel in the set waiters, then deletes
-- the set; it returns how many channels it published to. A value of
-- another type under waiters, or a set of more than maxwaiters members,
-- is deleted (UNLINK: freed off Redis's main thread) and reported in
-- foreign; its waiters, if any, find the fill at their next poll.
local function notify(waiters, msg, foreign)
  local n = 0
  local size = redis.pcall('SCARD', waiters)
  if othertype(size) or type(size) ~= 'number' or size > maxwaiters then
    drop(waiters)
    table.insert(foreign, 'w')
    return 0
  end
  local chans = redis.call('SMEMBERS', waiters)
  for _, ch in ipairs(chans) do
    redis.call('PUBLISH', ch, msg)
    n = n + 1
  end
  if n > 0 then
    drop(waiters)
  end
  return n
end


-- member makes entry a member of the tag's member set tkeys, unless the
-- set holds cap (> 0) other members already, and keeps the set at least
-- keep milliseconds; it reports whether entry is a member. A value of
-- another type under tkeys is dropped and reported in foreign as "tkeys".
local function member(tkeys, entry, cap, keep, foreign)
  local kind = redis.call('TYPE', tkeys).ok
  if kind ~= 'set' and kind ~= 'none' then
    drop(tkeys)
    table.insert(foreign, 'tkeys')
  end
  if redis.call('SISMEMBER', tkeys, entry) == 0 then
    if cap > 0 and redis.call('SCARD', tkeys) >= cap then
      return false
    end
    redis.call('SADD', tkeys, entry)
  end
  if redis.call('PTTL', tkeys) < tonumber(keep) then
    redis.call('PEXPIRE', tkeys, string.format('%d', keep))
  end
  return true
end

-- leaseleft returns the milliseconds left to the lease under name, or -2
-- when it is free. A lease the guard did not write (another type, no TTL,
-- not a canonical decimal) is dropped and reported in foreign as what.
-- Given fence, the key's counter, a lease with no counter or one below it
-- is foreign too: a lease is minted from the counter, which outlives it.
local function leaseleft(name, what, fence, foreign)
  local pttl = redis.call('PTTL', name)
  if pttl == -2 then
    return -2
  end
  local held = getstr(name, what, foreign)
  local cur = fence and counter(fence, foreign)
  if held and (pttl == -1 or not canon(held, fencemax) or (fence and (not cur or less(cur, held)))) then
    drop(name)
    table.insert(foreign, what)
    held = false
  end
  if not held then
    return -2
  end
  return pttl
end

-- takelease mints a fence from the counter fence (kept keep milliseconds)
-- and holds it as the lease under name for ms milliseconds; it returns the
-- fence.
local function takelease(name, fence, ms, keep, foreign)
  local f = guardmint(fence, keep, foreign)
  redis.call('SET', name, string.format('%d', f), 'PX', ms)
  return f
end

-- addwaiter adds channel to the set waiters, which the fill notifies, and
-- keeps the set at least wait milliseconds. A value of another type under
-- waiters is replaced and reported in foreign as "w".
local function addwaiter(waiters, channel, wait, foreign)
  local added = redis.pcall('SADD', waiters, channel)
  if othertype(added) then
    drop(waiters)
    table.insert(foreign, 'w')
    redis.call('SADD', waiters, channel)
  end
  if redis.call('PTTL', waiters) < wait then
    redis.call('PEXPIRE', waiters, wait)
  end
end
