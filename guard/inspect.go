package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/entry"
	"github.com/stampede-go/stampede/internal/hashtag"
)

// KeyInfo is what Redis holds for one key, as Inspect read it. Times are
// on the Redis clock.
type KeyInfo struct {
	Key   string
	Entry string // the entry's Redis name; the key's others add ":lease", ":backup", ":fence", ":w", ":inv"
	Slot  int    // the Redis Cluster hash slot of all its names
	Tag   string // its own hash tag ("{tag}..."), if any: InvalidateTag drops it
	// State: fresh, stale, negative, error, revalidate, oversize, pass,
	// failing, expired, invalidated, corrupt or missing.
	State      string
	FreshLeft  time.Duration // until fresh-until; negative once past
	StaleLeft  time.Duration // until stale-until, when Redis drops it
	Age        time.Duration // since it was written
	Size       int           // the value's bytes
	Fence      int64         // the fence its writer held
	LeaseFence int64         // the refresh lease holder's fence; 0: no lease held
	LeaseTTL   time.Duration
	// BackupFence is the backup lease holder's fence (WaitTimeoutPolicy
	// BackupLoad: a waiter loading beside a slow lease holder); 0: none.
	BackupFence int64
	BackupTTL   time.Duration
	Counter     int64    // the key's fence counter: the last fence minted
	Waiters     int      // nodes waiting for its fill
	TagKeys     []string // for a Tag: keys of it filled since it was last invalidated (100 at most, sorted)
	TagSize     int      // for a Tag: how many names its member set holds
	Foreign     []string // names holding data the guard did not write
}

// inspectTagKeys bounds KeyInfo.TagKeys.
const inspectTagKeys = 100

// Inspect reports what Redis holds for key (entry, lease, backup lease,
// fence, waiters, tag), with read commands only, in one round trip.
func (g *Group) Inspect(ctx context.Context, key string) (KeyInfo, error) {
	if err := g.check(ctx, key, noLoad); err != nil {
		return KeyInfo{}, err
	}
	nm := g.names(key)
	ki := KeyInfo{Key: key, Entry: nm.entry, Slot: hashtag.Slot(nm.entry)}
	if t, ok := hashtag.Tag(key); ok {
		ki.Tag = t
	}
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	c, err := g.inspectRead(rctx, nm)
	if err != nil {
		return KeyInfo{}, fmt.Errorf("guard: inspect: %w", err)
	}
	t, err := c.time.Result()
	if err != nil {
		return KeyInfo{}, fmt.Errorf("guard: inspect: %w", err)
	}
	now := t.UnixMilli()
	ki.Counter, _ = decimal(c.fence, c.fenceTTL, "fence", &ki)
	leaseInfo(&ki, c)
	backupInfo(&ki, c)
	ki.Waiters = int(count(c.waiters, "w", &ki))
	written, ok := entryInfo(&ki, c, now)
	if c.tagSize != nil {
		ki.TagSize = int(count(c.tagSize, "tkeys", &ki))
		ki.TagKeys = g.tagKeys(c.tagKeys.Val())
		// Written before the tag's last invalidation (Redis µs): the read
		// script deletes it as one the invalidation missed.
		if inv, held := decimal(c.tagInv, c.tagInvTTL, "tinv", &ki); held && ok && (ki.Fence < inv || (written+1)*1000 <= inv) {
			ki.State = "invalidated"
		}
	}
	return ki, nil
}

// inspectCmds are the replies of Inspect's pipeline.
type inspectCmds struct {
	time                   *redis.TimeCmd
	head, lease, fence     *redis.StringCmd
	backup                 *redis.StringCmd
	tagInv                 *redis.StringCmd // nil without a tag
	size, waiters, tagSize *redis.IntCmd    // tagSize: nil without a tag
	ttl, leaseTTL          *redis.DurationCmd
	backupTTL, fenceTTL    *redis.DurationCmd
	tagInvTTL              *redis.DurationCmd // nil without a tag
	tagKeys                *redis.StringSliceCmd
}

// inspectRead sends Inspect's read commands in one pipeline: to the master
// that holds nm on a cluster, so that TIME is that node's clock.
func (g *Group) inspectRead(ctx context.Context, nm names) (*inspectCmds, error) {
	var p redis.Pipeliner
	if cc, ok := g.rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, nm.entry)
		if err != nil {
			return nil, err
		}
		p = node.Pipeline()
	} else {
		p = g.rdb.Pipeline()
	}
	e := nm.keys[0]
	c := &inspectCmds{
		time: p.Time(ctx),
		// The header only: a value may be megabytes.
		head: p.GetRange(ctx, e, 0, entry.MaxHeaderLen-1),
		size: p.StrLen(ctx, e),
		ttl:  p.PTTL(ctx, e),
		// A foreign value may be megabytes: at most a number's digits
		// (and one more, so that a longer one is not read as a number),
		// its PTTL telling a missing name from an empty one.
		lease:     p.GetRange(ctx, nm.keys[1], 0, numberBytes),
		leaseTTL:  p.PTTL(ctx, nm.keys[1]),
		backup:    p.GetRange(ctx, nm.backupLease(), 0, numberBytes),
		backupTTL: p.PTTL(ctx, nm.backupLease()),
		fence:     p.GetRange(ctx, nm.keys[2], 0, numberBytes),
		fenceTTL:  p.PTTL(ctx, nm.keys[2]),
		waiters:   p.SCard(ctx, nm.keys[3]),
	}
	if len(nm.keys) == 7 {
		c.tagSize = p.SCard(ctx, nm.keys[5])
		c.tagKeys = p.SRandMemberN(ctx, nm.keys[5], inspectTagKeys)
		c.tagInv = p.GetRange(ctx, nm.keys[6], 0, numberBytes)
		c.tagInvTTL = p.PTTL(ctx, nm.keys[6])
	}
	_, err := p.Exec(ctx)
	var rerr redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) {
		// A reply error (WRONGTYPE: foreign data) is one name's; anything
		// else is Redis's.
		return nil, err
	}
	return c, nil
}

// entryInfo fills ki's entry fields from c, read at now (Redis ms), with
// the rules of the read script; it returns when the entry was written,
// and whether it holds a valid one.
func entryInfo(ki *KeyInfo, c *inspectCmds, now int64) (written int64, ok bool) {
	head, err := c.head.Bytes()
	switch {
	case errors.Is(err, redis.Nil) || (err == nil && len(head) == 0 && c.ttl.Val() == -2):
		// GETRANGE answers "" for no key: PTTL tells it from an empty
		// string.
		ki.State = "missing"
		return 0, false
	case err != nil:
		ki.State, ki.Foreign = "corrupt", append(ki.Foreign, "entry")
		return 0, false
	}
	e, derr := decodeHead(head, c.size.Val())
	if derr != nil || c.ttl.Val() < 0 {
		// Every entry the guard writes expires.
		ki.State = "corrupt"
		return 0, false
	}
	ki.Size = int(c.size.Val()) - len(head[:bytes.IndexByte(head, '\n')+1])
	ki.FreshLeft = millis(e.FreshUntil - now)
	ki.StaleLeft = millis(e.StaleUntil - now)
	ki.Age = millis(max(now-e.Written, 0))
	ki.Fence = e.Fence
	ki.State = entryState(&e, now)
	return e.Written, true
}

// decodeHead decodes an entry's header (its first bytes, head) given the
// entry's size: the flags that allow no value are checked against it.
func decodeHead(head []byte, size int64) (entry.Entry, error) {
	i := bytes.IndexByte(head, '\n')
	if i < 0 {
		return entry.Decode(head) // the error it makes
	}
	e, err := entry.Decode(head[:i+1])
	if err == nil && size > int64(i+1) && (e.Negative || e.Marker() || e.Oversize) {
		return e, errors.New("guard: a marker with a value")
	}
	return e, err
}

// entryState names e's state at now, as the read path judges it.
func entryState(e *entry.Entry, now int64) string {
	fresh, servable := now < e.FreshUntil, now < e.StaleUntil
	switch {
	case e.Failing:
		return "failing"
	case e.Pass && fresh:
		return "pass"
	case e.Oversize:
		return "oversize"
	case fresh && e.Negative:
		return "negative"
	case fresh && e.ErrMark:
		return "error"
	case fresh:
		return "fresh"
	case servable && e.MustRevalidate:
		return "revalidate"
	case servable && !e.Negative && !e.ErrMark && !e.Pass:
		return "stale"
	}
	return "expired"
}

// leaseInfo fills ki's lease fields from c, by the rules of the lease
// script (leaseleft in guard_lib.lua): a lease it would drop (no TTL, not
// a canonical decimal, above the key's counter, or with no counter) is not
// held; it is listed as foreign.
func leaseInfo(ki *KeyInfo, c *inspectCmds) {
	f, held := decimal(c.lease, c.leaseTTL, "lease", ki)
	switch {
	case !held || slices.Contains(ki.Foreign, "lease"):
	case c.leaseTTL.Val() < 0 || c.lease.Val() != strconv.FormatInt(f, 10) || f > fenceMax ||
		slices.Contains(ki.Foreign, "fence") || ki.Counter < f:
		ki.Foreign = append(ki.Foreign, "lease")
	default:
		ki.LeaseFence, ki.LeaseTTL = max(f, 1), c.leaseTTL.Val()
	}
}

// fenceMax is the largest fence the guard mints (fencemax in
// guard_lib.lua).
const fenceMax = 1 << 53

// backupInfo fills ki's backup lease fields from c. Its name is read with
// GETRANGE, which answers "" for a missing name: PTTL tells them apart.
// One with no TTL is foreign, as the backup script judges it.
func backupInfo(ki *KeyInfo, c *inspectCmds) {
	ttl := c.backupTTL.Val()
	f, held := decimal(c.backup, c.backupTTL, "backup", ki)
	switch {
	case !held || slices.Contains(ki.Foreign, "backup"):
	case ttl < 0:
		ki.Foreign = append(ki.Foreign, "backup")
	default:
		ki.BackupFence, ki.BackupTTL = max(f, 1), ttl
	}
}

// millis is ms milliseconds as a Duration, saturated: an entry's times
// may be any int64 (fresh until year 292,277,026,596 overflowed into a
// time long past).
func millis(ms int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	return time.Duration(min(max(ms, -most), most)) * time.Millisecond
}

// numberBytes is the last byte of a name holding a number that Inspect
// reads: 19 digits, and one more.
const numberBytes = 19

// decimal reads a counter or lease, read with GETRANGE: its number, and
// whether the name holds anything (GETRANGE answers "" for a missing
// name: its PTTL, ttl, tells). A value the guard did not write is listed
// as foreign.
func decimal(c *redis.StringCmd, ttl *redis.DurationCmd, name string, ki *KeyInfo) (int64, bool) {
	s, err := c.Result()
	switch {
	case errors.Is(err, redis.Nil) || (err == nil && s == "" && ttl.Val() == -2):
		return 0, false
	case err != nil:
		ki.Foreign = append(ki.Foreign, name)
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		ki.Foreign = append(ki.Foreign, name)
		return 0, true
	}
	return n, true
}

// count reads a set's size; another type is foreign.
func count(c *redis.IntCmd, name string, ki *KeyInfo) int64 {
	n, err := c.Result()
	if err != nil {
		ki.Foreign = append(ki.Foreign, name)
		return 0
	}
	return n
}

// tagKeys are the keys whose entries a tag's member set names, sorted.
func (g *Group) tagKeys(members []string) []string {
	keys := make([]string, 0, len(members))
	for _, m := range members {
		if key, role, ok := g.KeyOf(m); ok && role == roleEntry {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}
