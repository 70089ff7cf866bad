-- guard_backup.lua: after WaitTimeout, take the key's backup lease: one
-- load of the key fleet-wide besides its lease holder's, whose fill the
-- waiters share.
--
-- KEYS[1] entry key
-- KEYS[2] lease key   (string: the fence of the holder)
-- KEYS[3] fence key   (counter; never decreases, floored by the Redis clock)
-- KEYS[4] waiters key (set of the notification channels of callers waiting for a fill)
-- KEYS[5] backup lease key (string: the fence of the backup holder)
-- ARGV[1] backup lease in milliseconds
-- ARGV[2] waiter channel
-- ARGV[3] wait in milliseconds: the waiters set lives at least this long
-- ARGV[4] hold in milliseconds (TTL of the fence key at a mint)
--
-- Returns {x}: 0 when an entry is stored (it may be the fill waited for)
-- or the key's lease is free (a read takes it): read again; > 0 when this caller won the backup lease (x is its fence, minted
-- from the key's counter, so the holder's later fill is rejected once the
-- backup's has landed); < 0 when another caller holds it: -x is its
-- remaining lease in milliseconds, and the caller is registered as a
-- waiter for its fill. A backup lease that is not a canonical decimal, or
-- has no TTL, is foreign: dropped, and reported as a second element
-- "backup".
local entry, lease, fence, waiters, backup = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local leasems, channel, wait, keep = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4]
if not (leasems and leasems > 0 and leasems % 1 == 0) then
  return redis.error_reply('ERR guard_backup: bad lease ' .. tostring(ARGV[1]))
end
if channel == '' or not (wait and wait > 0 and wait % 1 == 0) then
  return redis.error_reply('ERR guard_backup: bad waiter ' .. tostring(ARGV[3]))
end
if not tonumber(keep) or tonumber(keep) <= 0 then
  return redis.error_reply('ERR guard_backup: bad hold ' .. tostring(keep))
end

if redis.call('EXISTS', entry) == 1 or redis.call('EXISTS', lease) == 0 then
  return {0}
end
local foreign = {}
local pttl = leaseleft(backup, 'backup', nil, foreign)
if pttl == -2 then
  local f = takelease(backup, fence, leasems, keep, foreign)
  return {f, table.concat(foreign, ',')}
end
addwaiter(waiters, channel, wait, foreign)
return {-math.max(pttl, 1), table.concat(foreign, ',')}
