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
-- Returns {x}: 0 when the entry holds what a read answers at once (it may
-- be the fill waited for) or the key's lease is free (a read takes it):
-- read again; > 0 when this caller won the backup lease (x is its fence,
-- minted from the key's counter, so the holder's later fill is rejected
-- once the backup's has landed); < 0 when another caller holds it: -x is
-- its remaining lease in milliseconds, and the caller is registered as a
-- waiter for its fill. An entry a read does not answer with (none, not a
-- v1 entry, no TTL, past fresh and flagged 'r', 'f' or 'o') is what the
-- waiters wait through, as guard_read.lua has them: it never keeps the
-- backup from loading. A backup lease that is not a canonical decimal,
-- has no TTL, or is above the fence counter (or has none: every backup
-- lease is minted from it) is foreign: dropped, and reported as a second
-- element "backup".
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

-- answers reports whether the entry holds what guard_read.lua answers a
-- waiter with at once, rather than registering it (a value the holder's
-- load must replace keeps the waiters waiting, so it must not keep the
-- backup from loading either).
local function answers()
  local head = redis.pcall('GETRANGE', entry, 0, 127)
  if othertype(head) then
    return false -- another type: the next read drops it
  end
  local fu, _, fl = parse(head, redis.call('STRLEN', entry))
  if not fu or redis.call('PTTL', entry) == -1 then
    return false
  end
  return tonumber(fu) > nowms() or not (fl == 'r' or fl == 'f' or fl == 'o')
end

if redis.call('EXISTS', lease) == 0 or answers() then
  return {0}
end
local foreign = {}
-- A backup lease is minted from the key's counter, as a lease is.
local pttl = leaseleft(backup, 'backup', fence, foreign)
if pttl == -2 then
  local f = takelease(backup, fence, leasems, keep, foreign)
  return {f, table.concat(foreign, ',')}
end
addwaiter(waiters, channel, wait, foreign)
return {-math.max(pttl, 1), table.concat(foreign, ',')}
