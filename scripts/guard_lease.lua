-- guard_lease.lua: renew or release a refresh lease the caller holds
-- (the watchdog of a background refresh, or giving up without a fill).
--
-- KEYS[1] lease key (string: the fence of the holder)
-- KEYS[2..] optional: names that must outlive the lease (the key's fence
--         counter, its tag's member set): an extension extends them to
--         at least as long, never shortens them
-- ARGV[1] fence of the caller (decimal)
-- ARGV[2] milliseconds: > 0 extends the lease to that long, 0 releases it
--
-- Returns 1 when the lease is the caller's (and was extended or released),
-- 0 otherwise (nothing is changed: a lease that is not ours is never touched).
local lease, mine, ms = KEYS[1], ARGV[1], tonumber(ARGV[2])

if not ms or ms < 0 or ms % 1 ~= 0 then
  return redis.error_reply('ERR guard_lease: bad milliseconds ' .. tostring(ARGV[2]))
end
-- A value of another type is not a lease of the caller's: 0, and the next
-- read drops it.
local held = redis.pcall('GET', lease)
if othertype(held) or held ~= mine then
  return 0
end
if ms > 0 then
  redis.call('PEXPIRE', lease, string.format('%d', ms))
  for i = 2, #KEYS do
    local left = redis.call('PTTL', KEYS[i])
    if left ~= -2 and left ~= -1 and left < ms then
      redis.call('PEXPIRE', KEYS[i], string.format('%d', ms))
    end
  end
else
  redis.call('DEL', lease)
end
return 1
