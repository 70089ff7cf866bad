package scripts

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Behaviour tests of the guard scripts, on a real standalone server and a
// real 3-master cluster (every script call on the cluster proves its keys
// share a slot: Redis refuses cross-slot scripts), and the happy path on
// miniredis.

const (
	retention = 24 * 60 * 60 * 1000 // fence retention, ms
	leaseMs   = 5000
)

// guardKeys are the names of one cache key, built as package guard builds them.
type guardKeys struct{ entry, lease, fence, waiters, inv string }

// newGuardKeys returns the names of a fresh user key holding '{', '}' and
// '%', so hash tagging is exercised.
func newGuardKeys(t *testing.T) guardKeys {
	base := hashtag.Base("stampede-test", redistest.Key(t, "user{key}%25}{"))
	return guardKeys{base, base + ":lease", base + ":fence", base + ":w", base + ":inv"}
}

func (k guardKeys) four() []string { return []string{k.entry, k.lease, k.fence, k.waiters} }
func (k guardKeys) five() []string { return []string{k.entry, k.lease, k.fence, k.waiters, k.inv} }

type readReply struct {
	value string
	found bool
	now   int64 // Redis ms
	x     int64 // 0, fence (> 0) or -pttl (< 0)
}

func guardRead(t *testing.T, rdb redis.UniversalClient, k guardKeys, lease int, channel string, wait int) readReply {
	t.Helper()
	res, err := GuardRead().Run(context.Background(), rdb, k.four(), lease, channel, wait, retention).Slice()
	if err != nil {
		t.Fatalf("guard_read: %v", err)
	}
	if len(res) != 3 {
		t.Fatalf("guard_read returned %#v, want 3 elements", res)
	}
	var r readReply
	switch v := res[0].(type) {
	case nil:
	case string:
		r.value, r.found = v, true
	default:
		t.Fatalf("guard_read returned entry %#v", res[0])
	}
	r.now, r.x = res[1].(int64), res[2].(int64)
	return r
}

type fillArgs struct {
	fence        int64
	payload      string
	fresh, stale int64 // ms
	loadUS       int64
	flags, mode  string
	keep         int64 // ms
	msg          string
}

func runFill(rdb redis.UniversalClient, k guardKeys, a fillArgs) ([]any, error) {
	if a.mode == "" {
		a.mode = "w"
	}
	return GuardFill().Run(context.Background(), rdb, k.five(),
		a.fence, a.payload, a.fresh, a.stale, a.loadUS, a.flags, a.mode, a.keep, a.msg, retention).Slice()
}

// guardFill runs guard_fill.lua and returns whether it wrote, the Redis
// clock in ms and how many waiters it notified.
func guardFill(t *testing.T, rdb redis.UniversalClient, k guardKeys, a fillArgs) (written bool, now, notified int64) {
	t.Helper()
	res, err := runFill(rdb, k, a)
	if err != nil {
		t.Fatalf("guard_fill: %v", err)
	}
	if len(res) != 4 || res[3] != "" {
		t.Fatalf("guard_fill returned %#v, want 4 elements, no foreign value dropped", res)
	}
	w := res[0].(int64)
	if w != 0 && w != 1 {
		t.Fatalf("guard_fill returned written = %d", w)
	}
	return w == 1, res[1].(int64), res[2].(int64)
}

func guardLease(t *testing.T, rdb redis.UniversalClient, k guardKeys, fence int64, ms int) bool {
	t.Helper()
	n, err := GuardLease().Run(context.Background(), rdb, []string{k.lease}, fence, ms).Int64()
	if err != nil {
		t.Fatalf("guard_lease: %v", err)
	}
	if n != 0 && n != 1 {
		t.Fatalf("guard_lease returned %d", n)
	}
	return n == 1
}

func guardInvalidate(t *testing.T, rdb redis.UniversalClient, k guardKeys, msg string) int64 {
	t.Helper()
	res, err := GuardInvalidate().Run(context.Background(), rdb, k.five(), retention, msg).Slice()
	if err != nil {
		t.Fatalf("guard_invalidate: %v", err)
	}
	if len(res) != 2 || res[1] != "" {
		t.Fatalf("guard_invalidate returned %#v, want the fence and no foreign value dropped", res)
	}
	return res[0].(int64)
}

// header is a parsed entry header, decoded here with plain string handling
// (package guard has the real decoder and tests the two agree).
type header struct {
	freshUntil, staleUntil, written, loadUS, fence int64
	flags, payload                                 string
}

func parseEntry(t *testing.T, v string) header {
	t.Helper()
	line, payload, ok := strings.Cut(v, "\n")
	if !ok || !strings.HasPrefix(line, "~1,") {
		t.Fatalf("entry %q has no v1 header", v)
	}
	f := strings.Split(strings.TrimPrefix(line, "~1,"), ",")
	if len(f) != 6 {
		t.Fatalf("entry header %q has %d fields, want 6", line, len(f))
	}
	var n [5]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || x < 0 || strconv.FormatInt(x, 10) != f[i] {
			t.Fatalf("entry header %q: field %d %q is not a canonical number", line, i, f[i])
		}
		n[i] = x
	}
	return header{n[0], n[1], n[2], n[3], n[4], f[5], payload}
}

func getEntry(t *testing.T, rdb redis.UniversalClient, k guardKeys) header {
	t.Helper()
	v, err := rdb.Get(context.Background(), k.entry).Result()
	if err != nil {
		t.Fatalf("GET entry: %v", err)
	}
	return parseEntry(t, v)
}

func pttl(t *testing.T, rdb redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return d
}

// wantTTL checks key expires in (max - slack, max].
func wantTTL(t *testing.T, rdb redis.UniversalClient, key string, maxMs int64) {
	t.Helper()
	got := pttl(t, rdb, key)
	hi := time.Duration(maxMs) * time.Millisecond
	if got > hi || got < hi-5*time.Second {
		t.Errorf("PTTL %s = %v, want about %v", key, got, hi)
	}
}

func exists(t *testing.T, rdb redis.UniversalClient, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func getString(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func members(t *testing.T, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	m, err := rdb.SMembers(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

// serverMicros is the Redis clock in µs, as TIME reports it.
func serverMicros(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// subscribe returns a subscription to channel that is live on the server.
func subscribe(t *testing.T, rdb redis.UniversalClient, channel string) *redis.PubSub {
	t.Helper()
	ctx := context.Background()
	ps := rdb.Subscribe(ctx, channel)
	t.Cleanup(func() { _ = ps.Close() })
	msg, err := ps.Receive(ctx)
	if err != nil {
		t.Fatalf("subscribe %s: %v", channel, err)
	}
	if _, ok := msg.(*redis.Subscription); !ok {
		t.Fatalf("subscribe %s: got %#v first", channel, msg)
	}
	return ps
}

func expectMessage(t *testing.T, ps *redis.PubSub, channel, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no message on %s: %v", channel, err)
	}
	if msg.Channel != channel || msg.Payload != payload {
		t.Fatalf("message %q on %s, want %q on %s", msg.Payload, msg.Channel, payload, channel)
	}
}

// checkNow checks a script's now_ms lies within the Redis clock readings
// taken around it.
func checkNow(t *testing.T, now, beforeUS, afterUS int64) {
	t.Helper()
	if now < beforeUS/1000 || now > afterUS/1000 {
		t.Errorf("now_ms = %d, outside the server clock [%d, %d]", now, beforeUS/1000, afterUS/1000)
	}
}

func TestGuardReadMiss(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		before := serverMicros(t, rdb)
		r := guardRead(t, rdb, k, leaseMs, "", 0)
		after := serverMicros(t, rdb)
		checkNow(t, r.now, before, after)
		if r.found || r.x <= 0 {
			t.Fatalf("first read of a missing key = %+v, want no entry and a fence", r)
		}
		f := r.x
		if f < before {
			t.Errorf("fence %d below the Redis clock in µs %d", f, before)
		}
		if got := getString(t, rdb, k.lease); got != strconv.FormatInt(f, 10) {
			t.Errorf("lease holds %q, want the fence %d", got, f)
		}
		wantTTL(t, rdb, k.lease, leaseMs)
		if got := getString(t, rdb, k.fence); got != strconv.FormatInt(f, 10) {
			t.Errorf("fence key holds %q, want %d", got, f)
		}
		wantTTL(t, rdb, k.fence, retention)

		// Busy lease: the caller gets -pttl and, with a channel, waits.
		ch1, ch2 := redistest.Key(t, "ch1"), redistest.Key(t, "ch2")
		r = guardRead(t, rdb, k, leaseMs, ch1, 2000)
		if r.found || r.x >= 0 || -r.x > leaseMs {
			t.Fatalf("read under a busy lease = %+v, want no entry and -pttl", r)
		}
		if got := members(t, rdb, k.waiters); !slices.Equal(got, []string{ch1}) {
			t.Errorf("waiters = %q, want [%s]", got, ch1)
		}
		wantTTL(t, rdb, k.waiters, 2000)

		// A longer wait extends the set's TTL; a shorter one never cuts it.
		r = guardRead(t, rdb, k, leaseMs, ch2, 30000)
		if r.x >= 0 {
			t.Fatalf("read = %+v, want -pttl", r)
		}
		wantTTL(t, rdb, k.waiters, 30000)
		guardRead(t, rdb, k, leaseMs, ch1, 10)
		wantTTL(t, rdb, k.waiters, 30000)
		if got, want := members(t, rdb, k.waiters), []string{ch1, ch2}; !slices.Equal(got, want) {
			t.Errorf("waiters = %q, want %q", got, want)
		}

		// No channel: not registered. Lease 0: neither lease nor waiter.
		if r = guardRead(t, rdb, k, leaseMs, "", 0); r.x >= 0 {
			t.Fatalf("read = %+v, want -pttl", r)
		}
		if r = guardRead(t, rdb, k, 0, redistest.Key(t, "ch3"), 1000); r.found || r.x != 0 {
			t.Fatalf("read with lease 0 = %+v, want {nil, now, 0}", r)
		}
		if got, want := members(t, rdb, k.waiters), []string{ch1, ch2}; !slices.Equal(got, want) {
			t.Errorf("waiters = %q, want %q", got, want)
		}
		if got := getString(t, rdb, k.fence); got != strconv.FormatInt(f, 10) {
			t.Errorf("busy reads changed the fence to %s from %d", got, f)
		}
		if got := getString(t, rdb, k.lease); got != strconv.FormatInt(f, 10) {
			t.Errorf("busy reads changed the lease to %s from %d", got, f)
		}
	})
}

func TestGuardFill(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		r := guardRead(t, rdb, k, leaseMs, "", 0)
		f := r.x
		ch := redistest.Key(t, "waiter")
		ps := subscribe(t, rdb, ch)
		if r := guardRead(t, rdb, k, leaseMs, ch, 10000); r.x >= 0 {
			t.Fatalf("second read = %+v, want -pttl", r)
		}

		payload := "line 1\nline 2\x00\xff"
		before := serverMicros(t, rdb)
		written, now, notified := guardFill(t, rdb, k, fillArgs{
			fence: f, payload: payload, fresh: 30000, stale: 60000, loadUS: 1234, msg: "filled",
		})
		after := serverMicros(t, rdb)
		if !written || notified != 1 {
			t.Fatalf("fill = written %v, notified %d; want true, 1", written, notified)
		}
		checkNow(t, now, before, after)
		want := header{now + 30000, now + 90000, now, 1234, f, "", payload}
		if got := getEntry(t, rdb, k); got != want {
			t.Errorf("entry = %+v, want %+v", got, want)
		}
		wantTTL(t, rdb, k.entry, 90000)
		if exists(t, rdb, k.lease) {
			t.Error("fill kept the lease")
		}
		if exists(t, rdb, k.waiters) {
			t.Error("fill kept the waiters")
		}
		expectMessage(t, ps, ch, "filled")

		// A fresh read: the entry, and nothing else touched.
		r = guardRead(t, rdb, k, leaseMs, redistest.Key(t, "late"), 10000)
		if !r.found || r.x != 0 || r.now < now {
			t.Fatalf("fresh read = %+v, want {entry, now, 0}", r)
		}
		if got := parseEntry(t, r.value); got != want {
			t.Errorf("fresh read returned %+v, want %+v", got, want)
		}
		if exists(t, rdb, k.lease) || exists(t, rdb, k.waiters) {
			t.Error("fresh read took the lease or registered a waiter")
		}
		if got := getString(t, rdb, k.fence); got != strconv.FormatInt(f, 10) {
			t.Errorf("fresh read minted a fence: %s, was %d", got, f)
		}

		// A fill with no waiters notifies nobody.
		if _, _, n := guardFill(t, rdb, k, fillArgs{fence: f, payload: "again", fresh: 1000, stale: 1000}); n != 0 {
			t.Errorf("fill notified %d, want 0", n)
		}
	})
}

func TestGuardReadFreshFlags(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, flags := range []string{"n", "e"} {
			k := newGuardKeys(t)
			payload := ""
			if flags == "e" {
				payload = "load failed"
			}
			if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: 1, payload: payload, fresh: 60000, flags: flags}); !w {
				t.Fatalf("flags %q: not written", flags)
			}
			r := guardRead(t, rdb, k, leaseMs, redistest.Key(t, "ch"), 1000)
			if !r.found || r.x != 0 {
				t.Fatalf("flags %q: read = %+v, want a fresh entry", flags, r)
			}
			if h := parseEntry(t, r.value); h.flags != flags || h.payload != payload || h.staleUntil != h.freshUntil {
				t.Errorf("flags %q: entry %+v", flags, h)
			}
			if exists(t, rdb, k.lease) || exists(t, rdb, k.waiters) {
				t.Errorf("flags %q: a fresh marker took the lease or registered a waiter", flags)
			}
			wantTTL(t, rdb, k.entry, 60000)
		}
	})
}

func TestGuardStaleRead(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		// fresh 0: stale from the moment it is written.
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: 1, payload: "old", fresh: 0, stale: 60000}); !w {
			t.Fatal("not written")
		}
		wantTTL(t, rdb, k.entry, 60000)

		a := guardRead(t, rdb, k, leaseMs, redistest.Key(t, "a"), 1000)
		if !a.found || a.x <= 0 || parseEntry(t, a.value).payload != "old" {
			t.Fatalf("first stale read = %+v, want the stale entry and the lease", a)
		}
		b := guardRead(t, rdb, k, leaseMs, redistest.Key(t, "b"), 1000)
		if !b.found || b.x >= 0 || -b.x > leaseMs || b.value != a.value {
			t.Fatalf("second stale read = %+v, want the stale entry and -pttl", b)
		}
		if exists(t, rdb, k.waiters) {
			t.Errorf("a caller served stale registered as a waiter: %q", members(t, rdb, k.waiters))
		}
		if c := guardRead(t, rdb, k, 0, "", 0); !c.found || c.x != 0 || c.value != a.value {
			t.Fatalf("read with lease 0 = %+v, want {stale, now, 0}", c)
		}

		// The refresh lands: fresh again, lease released.
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: a.x, payload: "new", fresh: 30000, stale: 30000}); !w {
			t.Fatal("refresh not written")
		}
		if exists(t, rdb, k.lease) {
			t.Error("refresh kept the lease")
		}
		if r := guardRead(t, rdb, k, leaseMs, "", 0); r.x != 0 || parseEntry(t, r.value).payload != "new" {
			t.Errorf("read after refresh = %+v", r)
		}
	})
}

// TestGuardLateFill: a holder whose lease was lost fills after a newer
// holder did; its write is rejected.
func TestGuardLateFill(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		fa := guardRead(t, rdb, k, leaseMs, "", 0).x
		// A's lease expires (GC pause, partition).
		if err := rdb.Del(context.Background(), k.lease).Err(); err != nil {
			t.Fatal(err)
		}
		fb := guardRead(t, rdb, k, leaseMs, "", 0).x
		if fa <= 0 || fb <= fa {
			t.Fatalf("fences %d then %d, want increasing", fa, fb)
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fb, payload: "b", fresh: 0, stale: 60000}); !w {
			t.Fatal("B's fill not written")
		}
		// C now refreshes the stale entry.
		fc := guardRead(t, rdb, k, leaseMs, "", 0).x
		if fc <= fb {
			t.Fatalf("C's fence %d, want above %d", fc, fb)
		}

		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fa, payload: "a", fresh: 60000, stale: 60000}); w {
			t.Fatal("late fill of A was written")
		}
		if h := getEntry(t, rdb, k); h.payload != "b" || h.fence != fb {
			t.Errorf("entry after the late fill = %+v, want B's", h)
		}
		if got := getString(t, rdb, k.lease); got != strconv.FormatInt(fc, 10) {
			t.Errorf("A's fill touched C's lease: %s, want %d", got, fc)
		}
		// C took a newer lease: a retry of B's fill is rejected now (C's load
		// may have begun before B's retried value was loaded); C's is stored.
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fb, payload: "b2", fresh: 0, stale: 60000}); w {
			t.Error("retry of an old fill written after a newer lease was taken")
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fc, payload: "c", fresh: 60000, stale: 60000}); !w {
			t.Error("C's fill rejected")
		}
		if h := getEntry(t, rdb, k); h.payload != "c" || h.fence != fc {
			t.Errorf("entry = %+v, want C's", h)
		}
		if exists(t, rdb, k.lease) {
			t.Error("C's fill kept its lease")
		}
	})
}

// TestGuardRejectedFillSettles: a rejected fill still releases its own
// lease and wakes the waiters.
func TestGuardRejectedFillSettles(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newGuardKeys(t)
		r := guardRead(t, rdb, k, leaseMs, "", 0)
		fa := r.x
		ch := redistest.Key(t, "waiter")
		ps := subscribe(t, rdb, ch)
		guardRead(t, rdb, k, leaseMs, ch, 10000)
		// A newer fill lands without the lease (its holder's lease was lost):
		// its fence was minted from the counter.
		newer := fmt.Sprintf("~1,%d,%d,%d,0,%d,\nnewer", r.now+60000, r.now+120000, r.now, fa+1)
		if err := rdb.Incr(ctx, k.fence).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, k.entry, newer, 2*time.Minute).Err(); err != nil {
			t.Fatal(err)
		}

		written, _, notified := guardFill(t, rdb, k, fillArgs{fence: fa, payload: "older", fresh: 60000, stale: 60000, msg: "done"})
		if written || notified != 1 {
			t.Fatalf("fill = written %v, notified %d; want false, 1", written, notified)
		}
		if got := getString(t, rdb, k.entry); got != newer {
			t.Errorf("entry = %q, want the newer one", got)
		}
		if exists(t, rdb, k.lease) || exists(t, rdb, k.waiters) {
			t.Error("rejected fill kept its lease or the waiters")
		}
		expectMessage(t, ps, ch, "done")
	})
}

func TestGuardInvalidate(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		guardFill(t, rdb, k, fillArgs{fence: 1, payload: "v", fresh: 0, stale: 60000})
		fa := guardRead(t, rdb, k, leaseMs, "", 0).x // a refresh in flight
		if fa <= 0 {
			t.Fatalf("stale read did not take the lease: %d", fa)
		}

		f := guardInvalidate(t, rdb, k, "gone")
		if f <= fa {
			t.Fatalf("invalidation fence %d, want above %d", f, fa)
		}
		if got := getString(t, rdb, k.inv); got != strconv.FormatInt(f, 10) {
			t.Errorf("inv = %q, want %d", got, f)
		}
		wantTTL(t, rdb, k.inv, retention)
		if got := getString(t, rdb, k.fence); got != strconv.FormatInt(f, 10) {
			t.Errorf("fence key = %q, want %d", got, f)
		}
		if exists(t, rdb, k.entry) || exists(t, rdb, k.lease) {
			t.Error("invalidate left the entry or the lease")
		}
		// The refresh that started before lands late: rejected.
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fa, payload: "pre", fresh: 60000, stale: 60000}); w {
			t.Error("fill fenced before the invalidation was written")
		}
		if exists(t, rdb, k.entry) {
			t.Error("entry exists after a rejected fill")
		}

		// A cold key with a waiter: invalidation wakes it.
		fb := guardRead(t, rdb, k, leaseMs, "", 0).x
		ch := redistest.Key(t, "waiter")
		ps := subscribe(t, rdb, ch)
		guardRead(t, rdb, k, leaseMs, ch, 10000)
		f2 := guardInvalidate(t, rdb, k, "gone")
		if f2 <= fb || fb <= f {
			t.Fatalf("fences %d, %d, %d, want increasing", f, fb, f2)
		}
		expectMessage(t, ps, ch, "gone")
		if exists(t, rdb, k.waiters) || exists(t, rdb, k.lease) {
			t.Error("invalidate left the waiters or the lease")
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fb, payload: "pre", fresh: 60000, stale: 60000}); w {
			t.Error("fill fenced before the second invalidation was written")
		}
		// A lease taken after the invalidation fills normally.
		fc := guardRead(t, rdb, k, leaseMs, "", 0).x
		if fc <= f2 {
			t.Fatalf("fence %d after the invalidation %d", fc, f2)
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fc, payload: "post", fresh: 60000, stale: 60000}); !w {
			t.Error("fill after the invalidation rejected")
		}
	})
}

func TestGuardFillMarker(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		// Cold key: the error marker is written and the lease kept for the
		// back-off.
		k := newGuardKeys(t)
		f := guardRead(t, rdb, k, leaseMs, "", 0).x
		marker := fillArgs{fence: f, payload: "boom", fresh: 2000, flags: "e", mode: "m", keep: 30000}
		if w, _, _ := guardFill(t, rdb, k, marker); !w {
			t.Fatal("marker on a cold key not written")
		}
		if h := getEntry(t, rdb, k); h.flags != "e" || h.payload != "boom" || h.fence != f {
			t.Errorf("marker = %+v", h)
		}
		wantTTL(t, rdb, k.entry, 2000)
		if got := getString(t, rdb, k.lease); got != strconv.FormatInt(f, 10) {
			t.Errorf("lease = %q, want kept as %d", got, f)
		}
		wantTTL(t, rdb, k.lease, 30000)

		// Stale value: the marker never replaces it.
		k = newGuardKeys(t)
		guardFill(t, rdb, k, fillArgs{fence: 1, payload: "stale value", fresh: 0, stale: 60000})
		f = guardRead(t, rdb, k, leaseMs, "", 0).x
		marker.fence = f
		if w, _, _ := guardFill(t, rdb, k, marker); w {
			t.Error("marker overwrote a stale value")
		}
		if h := getEntry(t, rdb, k); h.flags != "" || h.payload != "stale value" {
			t.Errorf("entry = %+v, want the stale value", h)
		}
		wantTTL(t, rdb, k.lease, 30000)

		// An invalidation after the lease fences out the marker too.
		k = newGuardKeys(t)
		f = guardRead(t, rdb, k, leaseMs, "", 0).x
		guardInvalidate(t, rdb, k, "")
		marker.fence = f
		if w, _, _ := guardFill(t, rdb, k, marker); w {
			t.Error("marker fenced before an invalidation was written")
		}
	})
}

func TestGuardFillKeepLease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		f := guardRead(t, rdb, k, leaseMs, "", 0).x
		// Somebody else's fence neither extends nor releases the lease.
		for _, keep := range []int64{60000, 0} {
			if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: f + 1, mode: "-", keep: keep}); w {
				t.Error("mode - wrote")
			}
			if got := getString(t, rdb, k.lease); got != strconv.FormatInt(f, 10) {
				t.Fatalf("lease = %q after a fill with another fence", got)
			}
			wantTTL(t, rdb, k.lease, leaseMs)
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: f, mode: "-", keep: 30000}); w {
			t.Error("mode - wrote")
		}
		if exists(t, rdb, k.entry) {
			t.Error("mode - created the entry")
		}
		if got := getString(t, rdb, k.lease); got != strconv.FormatInt(f, 10) {
			t.Errorf("lease = %q, want kept as %d", got, f)
		}
		wantTTL(t, rdb, k.lease, 30000)
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: f, mode: "-"}); w || exists(t, rdb, k.lease) {
			t.Error("mode - with keep 0 did not just release the lease")
		}
	})
}

func TestGuardLease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		f := guardRead(t, rdb, k, leaseMs, "", 0).x
		if !guardLease(t, rdb, k, f, 30000) {
			t.Fatal("renew of our lease failed")
		}
		wantTTL(t, rdb, k.lease, 30000)
		if guardLease(t, rdb, k, f+1, 60000) || guardLease(t, rdb, k, f-1, 0) {
			t.Fatal("another fence acted on our lease")
		}
		wantTTL(t, rdb, k.lease, 30000)
		if !guardLease(t, rdb, k, f, 0) {
			t.Fatal("release of our lease failed")
		}
		if exists(t, rdb, k.lease) {
			t.Fatal("released lease still exists")
		}
		if guardLease(t, rdb, k, f, 0) || guardLease(t, rdb, k, f, 1000) {
			t.Fatal("acted on a lease that is gone")
		}
		if exists(t, rdb, k.lease) {
			t.Fatal("renew recreated the lease")
		}
	})
}

func TestGuardReadUnparsable(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newGuardKeys(t)
		// A header claiming freshness that does not parse (the flag is
		// unknown) counts as missing too.
		for _, raw := range []string{"garbage", "~1,9999999999999,9999999999999,0,0,1,x\nv"} {
			if err := rdb.Set(ctx, k.entry, raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			r := guardRead(t, rdb, k, leaseMs, "", 0)
			if !r.found || r.value != raw || r.x <= 0 {
				t.Fatalf("read of %q = %+v, want the raw value and the lease", raw, r)
			}
			ch := redistest.Key(t, "ch")
			r2 := guardRead(t, rdb, k, leaseMs, ch, 1000)
			if !r2.found || r2.value != raw || r2.x >= 0 {
				t.Fatalf("second read of %q = %+v, want the raw value and -pttl", raw, r2)
			}
			if got := members(t, rdb, k.waiters); !slices.Equal(got, []string{ch}) {
				t.Errorf("waiters = %q, want [%s]", got, ch)
			}
			// It does not fence out a fill either.
			if w, _, n := guardFill(t, rdb, k, fillArgs{fence: r.x, payload: "ok", fresh: 0, stale: 60000}); !w || n != 1 {
				t.Fatalf("fill over %q: written %v, notified %d", raw, w, n)
			}
		}
	})
}

func TestGuardFencesIncrease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newGuardKeys(t)
		var prev int64
		for i := range 5 {
			f := guardRead(t, rdb, k, leaseMs, "", 0).x
			if f <= prev {
				t.Fatalf("lease %d: fence %d, previous %d", i, f, prev)
			}
			prev = f
			if i%2 == 0 {
				guardLease(t, rdb, k, f, 0)
			} else {
				guardFill(t, rdb, k, fillArgs{fence: f, mode: "-"})
			}
		}
		if inv := guardInvalidate(t, rdb, k, ""); inv <= prev {
			t.Fatalf("invalidation fence %d, previous %d", inv, prev)
		} else {
			prev = inv
		}
		// The counter is lost (no persistence, failover): the Redis clock
		// still keeps fences rising.
		if err := rdb.Del(ctx, k.fence).Err(); err != nil {
			t.Fatal(err)
		}
		before := serverMicros(t, rdb)
		f := guardRead(t, rdb, k, leaseMs, "", 0).x
		if f <= prev || f < before {
			t.Fatalf("fence after losing the counter = %d; previous %d, clock %d µs", f, prev, before)
		}
		wantTTL(t, rdb, k.fence, retention)
	})
}

func TestGuardBadArguments(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		k := newGuardKeys(t)
		ok := fillArgs{fence: 1, payload: "v", fresh: 1000, stale: 1000}
		for name, a := range map[string]fillArgs{
			"unknown flag":          {fence: 1, payload: "v", fresh: 1000, flags: "x"},
			"two flags":             {fence: 1, payload: "v", fresh: 1000, flags: "ne"},
			"negative with payload": {fence: 1, payload: "v", fresh: 1000, flags: "n"},
			"no windows":            {fence: 1, payload: "v"},
			"negative fence":        {fence: -1, payload: "v", fresh: 1000},
			"negative stale":        {fence: 1, payload: "v", fresh: 1000, stale: -1},
			"negative load":         {fence: 1, payload: "v", fresh: 1000, loadUS: -1},
			"huge window":           {fence: 1, payload: "v", fresh: 2e15},
			"bad mode":              {fence: 1, payload: "v", fresh: 1000, mode: "x"},
			"negative keep":         {fence: 1, payload: "v", fresh: 1000, keep: -1},
		} {
			if _, err := runFill(rdb, k, a); err == nil || !strings.Contains(err.Error(), "guard_fill") {
				t.Errorf("%s: fill error %v", name, err)
			}
		}
		if exists(t, rdb, k.entry) {
			t.Fatal("a rejected call wrote the entry")
		}
		if _, err := runFill(rdb, k, ok); err != nil {
			t.Fatal(err)
		}
		for name, args := range map[string][]any{
			"negative lease":   {-1, "", 0, retention},
			"fractional lease": {1.5, "", 0, retention},
			"channel, no wait": {leaseMs, "ch", 0, retention},
			"no retention":     {leaseMs, "", 0, 0},
		} {
			if err := GuardRead().Run(ctx, rdb, k.four(), args...).Err(); err == nil || !strings.Contains(err.Error(), "guard_read") {
				t.Errorf("%s: read error %v", name, err)
			}
		}
		if err := GuardLease().Run(ctx, rdb, []string{k.lease}, 1, -1).Err(); err == nil {
			t.Error("lease with negative ms: no error")
		}
		if err := GuardInvalidate().Run(ctx, rdb, k.five(), 0, "").Err(); err == nil {
			t.Error("invalidate without retention: no error")
		}
		if !exists(t, rdb, k.entry) {
			t.Error("a rejected invalidate deleted the entry")
		}
	})
}

// TestGuardMiniredis runs the happy path on embedded miniredis, which the
// guard uses when no redis-server is around (examples, quick tests).
func TestGuardMiniredis(t *testing.T) {
	_, c := redistest.Mini(t)
	var rdb redis.UniversalClient = c
	k := newGuardKeys(t)

	r := guardRead(t, rdb, k, leaseMs, "", 0)
	if r.found || r.x <= 0 {
		t.Fatalf("first read = %+v, want the lease", r)
	}
	f := r.x
	if got := getString(t, rdb, k.lease); got != strconv.FormatInt(f, 10) {
		t.Errorf("lease = %q, want %d", got, f)
	}
	ch := redistest.Key(t, "waiter")
	ps := subscribe(t, rdb, ch)
	if r := guardRead(t, rdb, k, leaseMs, ch, 10000); r.found || r.x >= 0 {
		t.Fatalf("second read = %+v, want -pttl", r)
	}
	if got := members(t, rdb, k.waiters); !slices.Equal(got, []string{ch}) {
		t.Errorf("waiters = %q", got)
	}

	written, now, notified := guardFill(t, rdb, k, fillArgs{fence: f, payload: "value", fresh: 30000, stale: 60000, loadUS: 99, msg: "filled"})
	if !written || notified != 1 {
		t.Fatalf("fill = %v, %d", written, notified)
	}
	if got, want := getEntry(t, rdb, k), (header{now + 30000, now + 90000, now, 99, f, "", "value"}); got != want {
		t.Errorf("entry = %+v, want %+v", got, want)
	}
	wantTTL(t, rdb, k.entry, 90000)
	expectMessage(t, ps, ch, "filled")
	if exists(t, rdb, k.lease) || exists(t, rdb, k.waiters) {
		t.Error("fill left the lease or the waiters")
	}

	r = guardRead(t, rdb, k, leaseMs, "", 0)
	if !r.found || r.x != 0 || parseEntry(t, r.value).payload != "value" {
		t.Fatalf("fresh read = %+v", r)
	}

	// Fencing works there too.
	f2 := guardInvalidate(t, rdb, k, "")
	if f2 <= f || exists(t, rdb, k.entry) {
		t.Fatalf("invalidate: fence %d after %d", f2, f)
	}
	if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: f, payload: "late", fresh: 1000}); w {
		t.Error("late fill written")
	}
	f3 := guardRead(t, rdb, k, leaseMs, "", 0).x
	if f3 <= f2 || !guardLease(t, rdb, k, f3, 0) {
		t.Errorf("fence %d after %d, or release failed", f3, f2)
	}
}

// TestGuardTakenOverFill: once another caller takes the lease over, the old
// holder's fill is rejected even before the new holder fills (the new
// holder's load may have begun first, and would land an older snapshot
// last). A retry while nobody took over is allowed. A lease-less fill
// (fence 0) mints a fence for its entry, retiring every older lease.
func TestGuardTakenOverFill(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		k := newGuardKeys(t)
		fa := guardRead(t, rdb, k, leaseMs, "", 0).x
		// A's lease ends (a pause, a partition); B takes the lease over.
		if err := rdb.Del(context.Background(), k.lease).Err(); err != nil {
			t.Fatal(err)
		}
		fb := guardRead(t, rdb, k, leaseMs, "", 0).x
		if fb <= fa {
			t.Fatalf("fences %d then %d, want increasing", fa, fb)
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fa, payload: "a", fresh: 60000}); w {
			t.Fatal("A's fill written after B took the lease over")
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fb, payload: "b", fresh: 60000}); !w {
			t.Fatal("B's fill rejected")
		}
		if w, _, _ := guardFill(t, rdb, k, fillArgs{fence: fb, payload: "b2", fresh: 60000}); !w {
			t.Fatal("B's retry rejected while nobody took the lease over")
		}

		// A lease-less fill over a missing entry mints a fence above D's
		// outstanding lease, so D's later fill cannot land an older value.
		k2 := newGuardKeys(t)
		fd := guardRead(t, rdb, k2, leaseMs, "", 0).x
		if w, _, _ := guardFill(t, rdb, k2, fillArgs{fence: 0, payload: "local", fresh: 60000}); !w {
			t.Fatal("lease-less fill over a missing entry rejected")
		}
		if h := getEntry(t, rdb, k2); h.payload != "local" || h.fence <= fd {
			t.Fatalf("lease-less entry = %+v, want payload local with a fence above %d", h, fd)
		}
		if w, _, _ := guardFill(t, rdb, k2, fillArgs{fence: fd, payload: "d", fresh: 60000}); w {
			t.Fatal("a lease older than the lease-less fill's fence was still allowed to write")
		}
		// And a lease-less fill never replaces a fenced entry.
		if w, _, _ := guardFill(t, rdb, k2, fillArgs{fence: 0, payload: "again", fresh: 60000}); w {
			t.Fatal("lease-less fill replaced a fenced entry")
		}
	})
}

// TestGuardForeignValues: something other than the guard wrote under a
// key's lease or invalidation name (a hash, or a string with no TTL: every
// lease the guard takes has one). The scripts drop such a value, say so,
// and go on, so the key's callers are neither kept waiting for a holder
// that does not exist nor left with a lease no fill can release.
func TestGuardForeignValues(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		t.Run("lease/hash", func(t *testing.T) {
			k := newGuardKeys(t)
			rdb.HSet(ctx, k.lease, "f", "v")
			res, err := GuardRead().Run(ctx, rdb, k.four(), leaseMs, "", 0, retention).Slice()
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 4 || res[3] != "lease" || res[2].(int64) <= 0 {
				t.Fatalf("guard_read = %#v; want the lease taken and the foreign value reported", res)
			}
			wantTTL(t, rdb, k.lease, leaseMs)
		})
		t.Run("lease/string without TTL", func(t *testing.T) {
			k := newGuardKeys(t)
			rdb.Set(ctx, k.lease, "12", 0)
			res, err := GuardRead().Run(ctx, rdb, k.four(), leaseMs, "", 0, retention).Slice()
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 4 || res[3] != "lease" || res[2].(int64) <= 0 {
				t.Fatalf("guard_read = %#v; want the lease taken and the foreign value reported", res)
			}
		})
		t.Run("lease/held by another reader", func(t *testing.T) {
			k := newGuardKeys(t)
			if x := guardRead(t, rdb, k, leaseMs, "", 0).x; x <= 0 {
				t.Fatalf("first read x = %d; want the lease", x)
			}
			// A lease the guard took is never mistaken for a foreign one.
			if x := guardRead(t, rdb, k, leaseMs, "", 0).x; x >= 0 {
				t.Fatalf("second read x = %d; want the holder's remaining lease", x)
			}
		})
		t.Run("lease/hash at fill", func(t *testing.T) {
			k := newGuardKeys(t)
			f := guardRead(t, rdb, k, leaseMs, "", 0).x
			rdb.Del(ctx, k.lease)
			rdb.HSet(ctx, k.lease, "f", "v")
			res, err := runFill(rdb, k, fillArgs{fence: f, payload: "v", fresh: 1000, stale: 1000})
			if err != nil {
				t.Fatalf("guard_fill: %v", err)
			}
			if len(res) != 4 || res[0] != int64(1) || res[3] != "lease" || exists(t, rdb, k.lease) {
				t.Fatalf("guard_fill = %#v; want written, the foreign lease dropped and reported", res)
			}
		})
		for _, fence := range []int64{0, 1} {
			t.Run("inv/hash/fence "+strconv.FormatInt(fence, 10), func(t *testing.T) {
				k := newGuardKeys(t)
				if fence > 0 {
					fence = guardRead(t, rdb, k, leaseMs, "", 0).x
				}
				rdb.HSet(ctx, k.inv, "f", "v")
				res, err := runFill(rdb, k, fillArgs{fence: fence, payload: "v", fresh: 1000, stale: 1000})
				if err != nil {
					t.Fatalf("guard_fill: %v", err)
				}
				// A fence-0 fill is rejected: the dropped marker might have
				// fenced it out. A fenced one is judged by the counter.
				want := int64(1)
				if fence == 0 {
					want = 0
				}
				if len(res) != 4 || res[0] != want || res[3] != "inv" {
					t.Fatalf("guard_fill = %#v; want written=%d and the foreign marker reported", res, want)
				}
				if exists(t, rdb, k.inv) || (fence > 0 && exists(t, rdb, k.lease)) {
					t.Fatal("the foreign marker or the lease is still there")
				}
			})
		}
	})
}

// TestGuardForeignData: for every name of a key, values the guard never
// writes there (another type; strings the guard would not write: not a
// canonical decimal, too large, no TTL) never fail a script. Each script
// drops the value, names it in its foreign element, and goes on: the read
// takes the lease, the fill writes, the invalidation mints.
func TestGuardForeignData(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		type plant func(k guardKeys) error
		str := func(name func(guardKeys) string, v string, ttl time.Duration) plant {
			return func(k guardKeys) error { return rdb.Set(ctx, name(k), v, ttl).Err() }
		}
		hash := func(name func(guardKeys) string) plant {
			return func(k guardKeys) error {
				rdb.Del(ctx, name(k))
				return rdb.HSet(ctx, name(k), "f", "v").Err()
			}
		}
		entry := func(k guardKeys) string { return k.entry }
		lease := func(k guardKeys) string { return k.lease }
		fence := func(k guardKeys) string { return k.fence }
		waiters := func(k guardKeys) string { return k.waiters }
		inv := func(k guardKeys) string { return k.inv }
		far := time.Now().Add(time.Hour).UnixMilli()
		valid := fmt.Sprintf("~1,%d,%d,0,0,1,\nv", far, far)
		for _, c := range []struct {
			name  string
			plant plant
			want  string // the name reported
		}{
			{"entry/hash", hash(entry), "entry"},
			{"entry/valid without TTL", str(entry, fmt.Sprintf("~1,1,%d,0,0,1,\nv", far), 0), "entry"},
			{"lease/garbage", str(lease, "zz", time.Hour), "lease"},
			{"lease/negative", str(lease, "-3", time.Hour), "lease"},
			{"lease/leading zero", str(lease, "012", time.Hour), "lease"},
			{"lease/above the counter", str(lease, "8000000000000000", time.Hour), "lease"},
			{"fence/garbage", str(fence, "garbage", 0), "fence"},
			{"fence/empty", str(fence, "", 0), "fence"},
			{"fence/negative", str(fence, "-5", 0), "fence"},
			{"fence/max int64", str(fence, "9223372036854775807", 0), "fence"},
			{"fence/above 2^53", str(fence, "9007199254740993", 0), "fence"},
			{"fence/hash", hash(fence), "fence"},
			{"waiters/string", str(waiters, "ch", 0), "w"},
			{"inv/hash", hash(inv), "inv"},
			{"inv/garbage", str(inv, "zzzzzzzzzzzzzzzzzzzzzzzzz", time.Hour), "inv"},
			{"inv/no TTL", str(inv, "1", 0), "inv"},
			{"inv/above the counter", str(inv, "8000000000000000", time.Hour), "inv"},
		} {
			t.Run(c.name, func(t *testing.T) {
				k := newGuardKeys(t)
				if err := c.plant(k); err != nil {
					t.Fatal(err)
				}
				var reported []string
				read, err := GuardRead().Run(ctx, rdb, k.four(), leaseMs, "chan", 10000, retention).Slice()
				if err != nil {
					t.Fatalf("guard_read failed on foreign data: %v", err)
				}
				if len(read) == 4 {
					reported = append(reported, read[3].(string))
				}
				f, _ := read[2].(int64)
				if f <= 0 {
					t.Fatalf("guard_read = %#v; want the lease taken", read)
				}
				if err := c.plant(k); err != nil { // again, for the fill to meet
					t.Fatal(err)
				}
				fill, err := runFill(rdb, k, fillArgs{fence: f, payload: "good", fresh: 60000, stale: 1000})
				if err != nil {
					t.Fatalf("guard_fill failed on foreign data: %v", err)
				}
				reported = append(reported, fill[3].(string))
				if fill[0] != int64(1) {
					t.Fatalf("guard_fill = %#v; want the fill written over foreign data", fill)
				}
				if got := getEntry(t, rdb, k); got.payload != "good" {
					t.Fatalf("entry %+v after the fill; want the good value", got)
				}
				if err := c.plant(k); err != nil {
					t.Fatal(err)
				}
				inv, err := GuardInvalidate().Run(ctx, rdb, k.five(), retention, "").Slice()
				if err != nil {
					t.Fatalf("guard_invalidate failed on foreign data: %v", err)
				}
				reported = append(reported, inv[1].(string))
				if !slices.ContainsFunc(reported, func(s string) bool { return slices.Contains(strings.Split(s, ","), c.want) }) {
					t.Fatalf("foreign %s never reported (reported %q)", c.want, reported)
				}
				if exists(t, rdb, k.entry) {
					t.Fatal("the invalidation left the entry")
				}
			})
		}
		// A valid entry with its TTL is the guard's: never reported.
		k := newGuardKeys(t)
		if err := rdb.Set(ctx, k.entry, valid, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if r := guardRead(t, rdb, k, leaseMs, "", 0); !r.found || r.x != 0 {
			t.Fatalf("read of a valid entry = %+v", r)
		}
	})
}
