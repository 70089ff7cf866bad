-- guard_fill.lua: store a loaded value, settle the refresh lease and wake the
-- callers waiting for the fill, in one round trip.
--
-- KEYS[1] entry key   (string: "~1,fresh_until,stale_until,written,load_us,fence,flags\n" payload)
-- KEYS[2] lease key   (string: the fence of the holder)
-- KEYS[3] fence key   (counter of the key's fences; read, and minted into by a fence-0 write)
-- KEYS[4] waiters key (set of the notification channels of callers waiting for a fill)
-- KEYS[5] invalidation key (string: the fence minted by the last invalidation)
-- KEYS[6] optional, for a key that holds a hash tag of its own: the tag's
--         member set (the entry names of its keys that were written)
-- KEYS[7] with KEYS[6]: the tag's invalidation key (string: the Redis time
--         in microseconds of its last invalidation, guard_invalidate_tag.lua)
-- ARGV[1] fence of the caller (decimal)
-- ARGV[2] payload
-- ARGV[3] fresh window in milliseconds (0 to 10^15)
-- ARGV[4] stale window in milliseconds (0 to 10^15); fresh + stale > 0 when writing
-- ARGV[5] duration of the load in microseconds (decimal, 0 to 9223372036854775)
-- ARGV[6] flags: "" value, "n" negative (payload must be empty), "e" error
--         marker, "r" value never served stale (kept past fresh to
--         revalidate), "f" failing marker, "p" pass marker, "o" oversize
--         marker (the three with an empty payload; "o": the value is too
--         large to store, and each node keeps its own copy)
-- ARGV[7] write mode: "w" write, "m" write only when no value is stored (no
--         entry, or a failing or pass marker: never overwrite a value with a
--         marker), "k" write ARGV[2] followed by the stored payload less its
--         first ARGV[11] bytes (a revalidation: the unchanged tail does not
--         travel), "c" write only if the stored entry is still the one whose
--         "fence,written" is ARGV[12] (a pass marker a call of its window
--         read; fence 0: a fence is minted), "-" do not write
-- ARGV[8] keep-lease in milliseconds: 0 releases the lease when it is the
--         caller's; > 0 keeps it that long when it is the caller's (back-off)
-- ARGV[9] notification payload, PUBLISHed to every waiter channel
-- ARGV[10] fence retention in milliseconds (TTL of the fence key); needed
--         when fence is 0 and the script writes
-- ARGV[11] with write mode "k" (keep the tail of a revalidated entry): the
--         number of payload bytes of the stored entry replaced by ARGV[2]
-- ARGV[12] with write mode "k" or "c": "fence,written" of the stored entry
--         the load revalidated (or the pass marker it read); the script
--         writes only if the entry is still that one (so the tail it keeps
--         is the one the loader confirmed, and a load of a pass window
--         never lands after anything written since)
-- ARGV[13] with KEYS[6]: the most keys the tag's member set holds (0: no
--         bound); a key that is not a member is not written past it.
--         Optional, default "0"
-- ARGV[14] "b" for the fill of a backup load (its lease is KEYS[2], the
--         key's lease another holder's): the fence counter is left as is.
--         Optional
-- ARGV[15] "B" when the last of KEYS is the key's backup lease (after
--         KEYS[5], or KEYS[7] with a tag): a holder's fill, judged beside
--         a backup load running (see below). Optional
--
-- A write is rejected (not done) when a fence above the caller's was minted
-- after its lease was taken (another node took the lease over, or an
-- invalidation), or when the current entry is a valid v1 entry written with
-- a higher fence. So a holder whose lease was taken over never stores,
-- whether or not the new holder has filled yet: the new holder's load may
-- have begun before the old holder's, and storing both would let the older
-- snapshot land last. An equal fence is allowed (a retry of the same fill
-- while nobody took the lease over). One exception: a holder that still
-- holds its lease, whose load began before the backup load running beside
-- it (the last fence minted, WaitTimeoutPolicy BackupLoad) stores: the
-- backup's load began later, so its fill, fenced higher, may follow, and
-- the waiters have the holder's value without waiting for the backup's.
--
-- Fence 0 is a caller that loaded without a lease (it waited too long for
-- another node's fill). It writes only when no fenced entry exists, and
-- then mints a fence for its entry, which retires every lease taken before:
-- their fills are rejected. Whether or not it wrote, the script settles the
-- caller's lease and wakes the waiters.
--
-- With a tag (KEYS[6], KEYS[7]), a write is also rejected when the tag was
-- invalidated after the caller's lease was minted (its fence, floored by
-- the Redis clock in microseconds, is below the invalidation's time), or,
-- for fence 0, at all within the fence retention; a written entry joins
-- the tag's member set, which lives as long as its longest-lived member.
--
-- Retention: the fence counter and the tag's member set outlive every
-- lease (guard_read.lua, guard_lease.lua). Once the caller's own lease is
-- released, and no fence was
-- minted after the caller's, the fence counter is kept only as long as
-- the entry or the invalidation marker (deleted when neither is left),
-- and the key leaves the tag's member set when it stored nothing (the set
-- is deleted, or lives as long as the entry, when the key is its only
-- member). So a key that stores nothing and holds no lease leaves no
-- name behind. A holder whose lease was taken over is then rejected while
-- the newer holder's entry lives (its fence is higher); once that expired,
-- the key is empty and such a fill stores a value loaded at most a hold
-- ago (ARGV[4] of guard_read.lua).
--
-- Foreign data (values the guard did not write) never fails the script and
-- never fences a fill out: each is dropped, like a corrupt entry, and
-- reported, so one foreign write can neither leave the key's lease
-- unreleased and its callers waiting, nor reject the key's fills for good.
-- Foreign means: another type under any name; an invalidation marker that
-- is not a canonical decimal, has no TTL or is above the fence counter it
-- was minted from; a fence counter that is not a canonical decimal of at
-- most 2^53; an entry whose fence would reject the fill but which has no
-- TTL, or a fence above the counter (every fence is minted from it); a
-- tag's invalidation key that is not a canonical decimal or has no TTL. A dropped invalidation
-- marker rejects this fill if it has fence 0 (it might have fenced it out);
-- a fenced fill is judged by the fence counter, which every invalidation
-- mints into.
--
-- Returns {written, now_ms, notified, foreign}: written is 1 when the entry
-- was stored and 0 otherwise, now_ms the Redis clock in milliseconds (the
-- entry's written time), notified the number of waiter channels published
-- to, foreign the names ("entry", "lease", "fence", "w", "inv", joined by
-- ",") whose foreign values were dropped, or "".
local entry, lease, fence, waiters, inv = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local nkeys, bkey = #KEYS, nil
if ARGV[15] == 'B' then
  bkey, nkeys = KEYS[#KEYS], #KEYS - 1
end
local tkeys, tinv
if nkeys >= 7 then
  tkeys, tinv = KEYS[6], KEYS[7]
end
local mine, payload = ARGV[1], ARGV[2]
local fresh, stale, loadus = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local flags, mode, hold, msg = ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
local keep = tonumber(ARGV[10])
local cap = tonumber(ARGV[13] or '0')
local backup = ARGV[14] == 'b'

local function natural(x)
  return x and x >= 0 and x % 1 == 0
end
if not (string.match(mine, '^%d+$') and int(mine, '9223372036854775807')) then
  return redis.error_reply('ERR guard_fill: bad fence ' .. mine)
end
if mode ~= 'w' and mode ~= 'm' and mode ~= 'k' and mode ~= 'c' and mode ~= '-' then
  return redis.error_reply('ERR guard_fill: bad write mode ' .. mode)
end
if not natural(hold) then
  return redis.error_reply('ERR guard_fill: bad keep-lease ' .. ARGV[8])
end
if mode ~= '-' then
  if not (natural(fresh) and natural(stale) and fresh + stale > 0
      and fresh <= 1e15 and stale <= 1e15) then
    return redis.error_reply('ERR guard_fill: bad windows ' .. ARGV[3] .. ' ' .. ARGV[4])
  end
  if not (string.match(loadus, '^%d+$') and int(loadus, '9223372036854775')) then
    return redis.error_reply('ERR guard_fill: bad load duration ' .. loadus)
  end
  if not (flags == '' or flags == 'e' or flags == 'r'
      or ((flags == 'n' or flags == 'f' or flags == 'p' or flags == 'o') and payload == '')) then
    return redis.error_reply('ERR guard_fill: bad flags ' .. flags)
  end
  if mode == 'k' and not (natural(tonumber(ARGV[11])) and string.match(ARGV[12] or '', '^%d+,%d+$')
      and (flags == '' or flags == 'r')) then
    return redis.error_reply('ERR guard_fill: bad revalidation ' .. tostring(ARGV[11]) .. ' ' .. tostring(ARGV[12]))
  end
  if mode == 'c' and not (string.match(ARGV[12] or '', '^%d+,%d+$') and (flags == '' or flags == 'r')) then
    return redis.error_reply('ERR guard_fill: bad compare ' .. tostring(ARGV[12]))
  end
  if (mine == '0' or mode == 'c') and not (keep and keep > 0 and keep % 1 == 0) then
    return redis.error_reply('ERR guard_fill: bad fence retention ' .. tostring(ARGV[10]))
  end
end

if not (cap and cap >= 0 and cap % 1 == 0) then
  return redis.error_reply('ERR guard_fill: bad tag bound ' .. tostring(ARGV[13]))
end

local now = nowms()
local written = 0
local foreign = {}
-- admit reports whether the entry may be written: a key of a tag must be
-- (or become) one of its members, which live as long as their entries.
local function admit()
  return not tkeys or member(tkeys, entry, cap, fresh + stale, foreign)
end
local held = redis.pcall('GET', lease)
if othertype(held) then
  drop(lease)
  table.insert(foreign, 'lease')
  held = false
end
-- beforebackup reports whether this holder's load began before the backup
-- load running beside it (WaitTimeoutPolicy BackupLoad), whose fence cur
-- is the last minted: then storing it keeps the order loads began in (the
-- backup's fill, fenced higher, replaces it), and the waiters need not
-- wait for the backup. The caller still holds its own lease (no holder
-- took it over), the backup lease holds cur, and the load's start on the
-- Redis clock, now less its duration (no earlier than its true start: the
-- fill is sent after the load ended), is before cur (at least the
-- backup's mint time, in microseconds: fence_lib.lua). A failure of the
-- holder's (an error or failing marker) is fenced out as before.
local function beforebackup(cur)
  -- An answer only (a value, or not found): a holder's failure must not
  -- answer the waiters while the backup, their second chance, runs.
  if backup or not bkey or held ~= mine or not (flags == '' or flags == 'r' or flags == 'n') then
    return false
  end
  local b = redis.pcall('GET', bkey)
  if othertype(b) or type(b) ~= 'string' or b ~= cur or redis.call('PTTL', bkey) < 0 then
    return false
  end
  local t = redis.call('TIME')
  local startus = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(loadus)
  return startus < tonumber(cur)
end
if mode == 'c' then
  -- The pass marker read is still there: nothing was written or
  -- invalidated since (an invalidation deletes the entry, and a marker's
  -- fence and written time are its own). The fence counter and the
  -- invalidation marker need no check.
  local head = redis.pcall('GETRANGE', entry, 0, 127)
  if othertype(head) then
    drop(entry)
    table.insert(foreign, 'entry')
    head = nil
  end
  local _, f, fl, w = parse(head, head and redis.call('STRLEN', entry) or 0)
  if f and (fl == 'p' or fl == 'f') and f .. ',' .. w == ARGV[12] and admit() then
    local header = string.format('~1,%d,%d,%d,%s,%d,%s\n',
      now + fresh, now + fresh + stale, now, loadus, guardmint(fence, keep, foreign), flags)
    redis.call('SET', entry, header .. payload, 'PX', string.format('%d', fresh + stale))
    written = 1
  end
elseif mode ~= '-' then
  local ok = true
  local cur = counter(fence, foreign)
  local gen = redis.pcall('GET', inv)
  local badinv = othertype(gen)
  if gen and not badinv then
    badinv = not canon(gen, fencemax) or redis.call('PTTL', inv) == -1 or (cur and less(cur, gen))
  end
  if badinv then
    drop(inv)
    table.insert(foreign, 'inv')
    gen = false
    ok = mine ~= '0'
  end
  if gen and less(mine, gen) then
    ok = false
  end
  if ok and tinv then
    local t = taginv(tinv, foreign)
    if t and (mine == '0' or less(mine, t)) then
      ok = false
    end
  end
  if ok and mine ~= '0' and cur and less(mine, cur) and not beforebackup(cur) then
    ok = false
  end
  local tail = nil
  if ok then
    if mode == 'm' then
      local head = redis.pcall('GETRANGE', entry, 0, 127)
      if othertype(head) then
        drop(entry)
        table.insert(foreign, 'entry')
        head = nil
      end
      local _, _, fl = parse(head, head and redis.call('STRLEN', entry) or 0)
      ok = redis.call('EXISTS', entry) == 0 or fl == 'f' or fl == 'p'
    elseif mode == 'k' then
      -- The entry must still be the one revalidated: same writer fence and
      -- written time. Its tail is copied inside Redis, never sent.
      local old = getstr(entry, 'entry', foreign)
      local _, f, fl, w, hl = parse(old, old and #old or 0)
      local trim = tonumber(ARGV[11])
      if not f or fl == 'n' or fl == 'e' or fl == 'o' or f .. ',' .. w ~= ARGV[12] or hl + trim > #old then
        ok = false
      else
        tail = string.sub(old, hl + trim + 1)
      end
    else
      -- Only the header is needed: do not copy a large payload into Lua.
      local head = redis.pcall('GETRANGE', entry, 0, 127)
      if othertype(head) then
        drop(entry)
        table.insert(foreign, 'entry')
      else
        local _, f = parse(head, redis.call('STRLEN', entry))
        if f and less(mine, f) then
          if redis.call('PTTL', entry) == -1 or (cur and less(cur, f)) then
            table.insert(foreign, 'entry') -- overwritten below
          else
            ok = false
          end
        end
      end
    end
  end
  if ok then
    ok = admit()
  end
  if ok then
    local f = mine
    if mine == '0' then
      f = string.format('%d', guardmint(fence, keep, foreign))
    end
    local header = string.format('~1,%d,%d,%d,%s,%s,%s\n',
      now + fresh, now + fresh + stale, now, loadus, f, flags)
    redis.call('SET', entry, header .. payload .. (tail or ''), 'PX', string.format('%d', fresh + stale))
    written = 1
  end
end
-- settle ties the key's names to what is left once its lease is given
-- back and nobody minted after the caller (see Retention above).
local function settle()
  if redis.call('GET', fence) ~= mine then
    return
  end
  local need = math.max(redis.call('PTTL', entry), redis.call('PTTL', inv))
  if need <= 0 then
    redis.call('DEL', fence)
  elseif redis.call('PTTL', fence) > need then
    redis.call('PEXPIRE', fence, need)
  end
  if not tkeys or redis.call('TYPE', tkeys).ok ~= 'set' then
    return
  end
  local life = redis.call('PTTL', entry)
  if life < 0 then
    redis.call('SREM', tkeys, entry)
  elseif redis.call('SCARD', tkeys) == 1 and redis.call('SISMEMBER', tkeys, entry) == 1 then
    redis.call('PEXPIRE', tkeys, life)
  end
end

if held == mine then
  if hold > 0 then
    redis.call('PEXPIRE', lease, string.format('%d', hold))
    if redis.call('PTTL', fence) < hold then
      redis.call('PEXPIRE', fence, string.format('%d', hold)) -- a lease never outlives its counter
    end
  else
    redis.call('DEL', lease)
    if not backup then
      settle()
    end
  end
end

return {written, now, notify(waiters, msg, foreign), table.concat(foreign, ',')}
