-- guard_lib.lua: functions shared by the guard scripts. scripts.go puts this
-- chunk in front of every guard script, after fence_lib.lua (Redis Lua has
-- no includes); it is never run alone.

-- nowms returns the Redis clock in milliseconds.
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- int reports whether the decimal string s is canonical (no leading zero)
-- and at most max (a decimal string).
local function int(s, max)
  return #s <= #max and (#s == 1 or s:byte(1) ~= 48) and (#s < #max or s <= max)
end

-- parse applies the rules of decodeEntry (guard/entry.go) to an entry whose
-- first bytes (at least 128, or all) are v and whose length is n; it returns
-- the fresh_until, fence and flags fields (strings) of a valid v1 entry,
-- then its written field and the length of its header, or nil.
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
      or ((fl == 'n' or fl == 'f' or fl == 'p') and n == #h)) then
    return nil
  end
  return fu, f, fl, w, #h
end

-- notify publishes msg to every channel in the set waiters, then deletes
-- the set; it returns how many channels it published to.
local function notify(waiters, msg)
  local n = 0
  for _, ch in ipairs(redis.call('SMEMBERS', waiters)) do
    redis.call('PUBLISH', ch, msg)
    n = n + 1
  end
  if n > 0 then
    redis.call('DEL', waiters)
  end
  return n
end

