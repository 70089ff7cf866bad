-- guard_read.lua: read a cache entry and, when it is not fresh, try to take
-- its refresh lease in the same round trip.
--
-- KEYS[1] entry key   (string: "~1,fresh_until,stale_until,written,load_us,fence,flags\n" payload)
-- KEYS[2] lease key   (string: the fence of the holder)
-- KEYS[3] fence key   (counter; never decreases, floored by the Redis clock)
-- KEYS[4] waiters key (set of the notification channels of callers waiting for a fill)
-- KEYS[5] optional, not read (the key's invalidation key: the names
--         guard_fill.lua takes, in its order)
-- KEYS[6] optional, for a key that holds a hash tag of its own: the tag's
--         member set (the entry names of its keys that were written or
--         hold a lease); a lease won joins the key to it
-- KEYS[7] optional, for a key that holds a hash tag of its own: the tag's
--         invalidation key (string: Redis time in microseconds of its last
--         invalidation, guard_invalidate_tag.lua)
-- ARGV[1] lease in milliseconds; 0 = only read, never try the lease
-- ARGV[2] waiter channel; "" = do not register as a waiter
-- ARGV[3] wait in milliseconds (> 0 when ARGV[2] is set): the waiters set lives
--         at least this long
-- ARGV[4] milliseconds the fence key lives at least after a mint (with
--         KEYS[6], the member set too): the lease's, which the holder's
--         watchdog extends together with them (guard_lease.lua)
-- ARGV[5] "1" to try the lease even when the entry is fresh (early refresh);
--         optional, default "0"
-- ARGV[6] with KEYS[6]: the most keys the member set holds (0: no bound);
--         optional, default "0"
--
-- Returns {entry, now_ms, x}: entry is the raw value (nil when missing),
-- now_ms the Redis clock in milliseconds, and x
--   = 0      when the entry is fresh, or the lease was not tried (ARGV[1] = 0);
--   > 0      when this caller won the lease: x is its fence, the lease holds it;
--   < 0      when another caller holds the lease: -x (>= 1) is its remaining
--            lease in milliseconds.
-- A fourth element, a comma list of names ("entry", "lease", "fence", "w"),
-- is returned when a value the guard did not write sat under those names of
-- the key: it was dropped, as a corrupt entry is, and the read went on, so
-- foreign data under one key's names never fails the script (which would
-- count against Redis's health) and never keeps the key's callers waiting
-- for a holder that does not exist. A fifth element, 1, says the lease was
-- not tried because the key's tag is full (ARGV[6] members, this key not
-- one of them): x is 0, and the caller loads for itself, storing nothing.
-- Foreign means: another type under any
-- name; an entry of format v1 with no TTL;
-- a lease with no TTL, that is not a canonical decimal, or with no fence
-- counter or one below it (a lease is minted from the counter, which
-- outlives it); a fence counter that is not a canonical
-- decimal of at most 2^53.
-- Fresh negative ('n') and error-marker ('e') entries count as fresh. A value
-- that is not a valid v1 entry counts as missing (the lease is tried, waiters
-- are registered) but is still returned so the caller can report it. Only a
-- caller that finds no usable entry registers as a waiter; one that finds a
-- stale entry is served that, unless it is flagged 'r' (never served stale:
-- kept only for the next load to revalidate), which counts as missing, as
-- does a failing marker ('f': no value; the key's loads fail for their own
-- callers, who take turns under the lease). A fresh pass marker ('p') is
-- returned like any fresh entry: each caller then runs its own load. A
-- stale oversize marker ('o': the value is kept by each node, not here)
-- registers too: a node without its own copy waits for the refresh.
-- Fresh oversize markers count as fresh.
--
-- With KEYS[7], an entry written before the tag's last invalidation is one
-- that invalidation missed (its name was lost from the member set: evicted,
-- overwritten, deleted by hand): it is deleted and read as missing, so an
-- InvalidateTag holds whatever became of the member set. A value under
-- KEYS[7] that is not a canonical decimal, or has no TTL (every one the
-- guard writes expires), is foreign ("tinv").
local entry, lease, fence, waiters, tinv = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7]
local leasems, channel = tonumber(ARGV[1]), ARGV[2]
local wait, keep = tonumber(ARGV[3]), ARGV[4]
local tkeys, cap = KEYS[6], tonumber(ARGV[6] or '0')

if not leasems or leasems < 0 or leasems % 1 ~= 0 then
  return redis.error_reply('ERR guard_read: bad lease ' .. tostring(ARGV[1]))
end
if not tonumber(keep) or tonumber(keep) <= 0 then
  return redis.error_reply('ERR guard_read: bad fence retention ' .. tostring(keep))
end
if channel ~= '' and (not wait or wait <= 0 or wait % 1 ~= 0) then
  return redis.error_reply('ERR guard_read: bad wait ' .. tostring(ARGV[3]))
end

if not cap or cap < 0 or cap % 1 ~= 0 then
  return redis.error_reply('ERR guard_read: bad tag bound ' .. tostring(ARGV[6]))
end

local foreign = {}
local function reply(v, now, x)
  if #foreign > 0 then
    return {v, now, x, table.concat(foreign, ',')}
  end
  return {v, now, x}
end

local now = nowms()
local v = getstr(entry, 'entry', foreign)
local fu, fl = nil, nil
local f, w = nil, nil
if v then
  fu, f, fl, w = parse(v, #v)
  if fu then
    -- Every entry the guard writes expires (at its stale_until).
    if redis.call('PTTL', entry) == -1 then
      drop(entry)
      table.insert(foreign, 'entry')
      v, fu, fl = false, nil, nil
    end
  end
  if fu and tinv then
    local t = taginv(tinv, foreign)
    -- Filled under a fence minted before the invalidation (fences are
    -- floored by the Redis clock in µs, and guard_fill.lua rejects such a
    -- fill once the tag is invalidated), or written in an earlier
    -- millisecond (should the fence counter have run ahead of the clock).
    if t and (less(f, t) or (tonumber(w) + 1) * 1000 <= tonumber(t)) then
      drop(entry)
      v, fu, fl = false, nil, nil
    end
  end
end
if fu and tonumber(fu) > now and ARGV[5] ~= '1' then
  return reply(v, now, 0)
end
if leasems == 0 then
  return reply(v, now, 0)
end

local pttl = leaseleft(lease, 'lease', fence, foreign)
if pttl == -2 then
  if tkeys then
    -- The key joins its tag's members before its lease is minted, so an
    -- invalidation of the tag while the load runs fences out its fill.
    if not member(tkeys, entry, cap, keep, foreign) then
      return {v, now, 0, table.concat(foreign, ','), 1}
    end
  end
  return reply(v, now, takelease(lease, fence, leasems, keep, foreign))
end

if pttl < 1 then
  pttl = 1
end
if (not fu or fl == 'r' or fl == 'f' or fl == 'o') and channel ~= '' then
  addwaiter(waiters, channel, wait, foreign)
end
return reply(v, now, -pttl)
