-- lock_lib.lua: what the reentrant lock's scripts share. scripts.go puts
-- this chunk in front of lock_acquire.lua, lock_refresh.lua and
-- lock_release.lua (Redis Lua has no includes); it is never run alone.

-- hdel deletes the fields listed in fields from the hash h, a thousand at a
-- time: unpack fails past the Lua stack's limit (about 8,000 values), and
-- an owner may leave that many holds to end on their own.
local function hdel(h, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', h, unpack(fields, i, math.min(i + 999, #fields)))
  end
end
