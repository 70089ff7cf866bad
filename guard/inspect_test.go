package guard

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestInspectFilled: a filled key is fresh, with its windows, size, age
// and fence; no lease is held and nobody waits.
func TestInspectFilled(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxT(t)
		g := newGroup(t, rdb, Options{FreshFor: time.Minute, StaleFor: 5 * time.Minute, Jitter: Disabled})
		key := redistest.Key(t)
		if _, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("twelve bytes"), nil }); err != nil {
			t.Fatal(err)
		}
		ki, err := g.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if ki.State != "fresh" || ki.Size != 12 || ki.Key != key || ki.Entry != g.names(key).entry {
			t.Errorf("Inspect = %+v, want fresh, 12 bytes, under %q", ki, g.names(key).entry)
		}
		if ki.FreshLeft <= 50*time.Second || ki.FreshLeft > time.Minute {
			t.Errorf("FreshLeft = %v, want about 1m", ki.FreshLeft)
		}
		if d := ki.StaleLeft - ki.FreshLeft; d != 5*time.Minute {
			t.Errorf("StaleLeft - FreshLeft = %v, want StaleFor 5m", d)
		}
		if ki.Age < 0 || ki.Age > 10*time.Second {
			t.Errorf("Age = %v, want a few ms", ki.Age)
		}
		if ki.Fence <= 0 || ki.Counter < ki.Fence {
			t.Errorf("Fence %d, Counter %d: want a fence, and a counter at least that", ki.Fence, ki.Counter)
		}
		if ki.LeaseFence != 0 || ki.Waiters != 0 || ki.Tag != "" || len(ki.Foreign) != 0 {
			t.Errorf("Inspect = %+v: want no lease, waiter, tag or foreign name", ki)
		}
	})
}

// TestInspectLease: while a slow load runs, the key is missing and its
// lease is held with the fence the counter minted last.
func TestInspectLease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxT(t)
		g := newGroup(t, rdb, Options{LockTTL: 10 * time.Second})
		key := redistest.Key(t)
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := g.Do(ctx, key, func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return []byte("v"), nil
			})
			done <- err
		}()
		<-started
		ki, err := g.Inspect(ctx, key)
		close(release)
		if err != nil {
			t.Fatal(err)
		}
		if ki.State != "missing" || ki.LeaseFence == 0 || ki.LeaseFence != ki.Counter {
			t.Errorf("Inspect during the load = %+v: want missing, a lease whose fence is the counter's", ki)
		}
		if ki.LeaseTTL <= 0 || ki.LeaseTTL > 10*time.Second {
			t.Errorf("LeaseTTL = %v, want (0, LockTTL]", ki.LeaseTTL)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ki, err = g.Inspect(ctx, key)
		if err != nil || ki.State != "fresh" || ki.LeaseFence != 0 || ki.Fence != ki.Counter {
			t.Errorf("Inspect after the fill = %+v, %v: want fresh under the lease's fence, no lease", ki, err)
		}
	})
}

// TestInspectBackup: while a backup load runs beside a stuck lease
// holder, Inspect reports the backup lease, minted after the lease; a
// value under the backup name the guard would not have written there is
// listed as foreign, not as a lease.
func TestInspectBackup(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := ctxT(t)
	o := Options{Namespace: redistest.Key(t) + ":", LockTTL: 10 * time.Second,
		WaitTimeout: 100 * time.Millisecond, WaitTimeoutPolicy: BackupLoad}
	holder, waiter := newGroup(t, rdb, o), newGroup(t, rdb, o)
	key := "k"
	release := make(chan struct{})
	held := holdLease(t, holder, key, release)
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := waiter.Do(ctx, key, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("backup"), nil
		})
		done <- err
	}()
	<-started
	ki, err := waiter.Inspect(ctx, key)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	if ki.BackupFence == 0 || ki.BackupFence <= ki.LeaseFence || ki.BackupFence != ki.Counter {
		t.Errorf("Inspect during the backup load = %+v: want a backup lease above the lease, whose fence is the counter's", ki)
	}
	if ki.BackupTTL <= 0 || ki.BackupTTL > 10*time.Second {
		t.Errorf("BackupTTL = %v, want (0, LockTTL]", ki.BackupTTL)
	}
	for _, ch := range []<-chan error{held, done} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if ki, err := waiter.Inspect(ctx, key); err != nil || ki.BackupFence != 0 {
		t.Errorf("Inspect after the fills = %+v, %v: want no backup lease", ki, err)
	}

	name := waiter.names(key).backupLease()
	for what, plant := range map[string]func() error{
		"a hash":      func() error { return rdb.HSet(ctx, name, "f", "v").Err() },
		"words":       func() error { return rdb.Set(ctx, name, "not a lease", time.Minute).Err() },
		"negative":    func() error { return rdb.Set(ctx, name, "-5", time.Minute).Err() },
		"no TTL":      func() error { return rdb.Set(ctx, name, "5", 0).Err() },
		"10 MB":       func() error { return rdb.Set(ctx, name, strings.Repeat("7", 10<<20), time.Minute).Err() },
		"empty":       func() error { return rdb.Set(ctx, name, "", time.Minute).Err() },
		"binary zero": func() error { return rdb.Set(ctx, name, "\x00", time.Minute).Err() },
	} {
		if err := rdb.Del(ctx, name).Err(); err != nil {
			t.Fatal(err)
		}
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		ki, err := waiter.Inspect(ctx, key)
		if err != nil || ki.BackupFence != 0 || !slices.Equal(ki.Foreign, []string{"backup"}) {
			t.Errorf("%s under the backup name: Inspect = %+v, %v; want no backup lease, Foreign [backup]", what, ki, err)
		}
	}
	rdb.Del(ctx, name)
}

// TestInspectForeignLease: what the lease script would drop as foreign (no
// TTL, not a canonical decimal, above the key's counter, another type) is
// no lease held, listed as foreign; before, Inspect reported it held ("a
// node is loading it"). A lease the guard could have minted is held.
func TestInspectForeignLease(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := ctxT(t)
	g := newGroup(t, rdb, Options{Namespace: redistest.Key(t) + ":"})
	key := "k"
	if _, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	nm := g.names(key)
	counter, err := rdb.Get(ctx, nm.keys[2]).Int64()
	if err != nil {
		t.Fatal(err)
	}
	c := strconv.FormatInt(counter, 10)
	lease := nm.keys[1]
	for what, plant := range map[string]func() error{
		"a hash":            func() error { return rdb.HSet(ctx, lease, "f", "v").Err() },
		"words":             func() error { return rdb.Set(ctx, lease, "not a lease", time.Minute).Err() },
		"negative":          func() error { return rdb.Set(ctx, lease, "-5", time.Minute).Err() },
		"a plus sign":       func() error { return rdb.Set(ctx, lease, "+"+c, time.Minute).Err() },
		"a leading zero":    func() error { return rdb.Set(ctx, lease, "0"+c, time.Minute).Err() },
		"no TTL":            func() error { return rdb.Set(ctx, lease, c, 0).Err() },
		"above the counter": func() error { return rdb.Set(ctx, lease, strconv.FormatInt(counter+1, 10), time.Minute).Err() },
		"empty":             func() error { return rdb.Set(ctx, lease, "", time.Minute).Err() },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		ki, err := g.Inspect(ctx, key)
		if err != nil || ki.LeaseFence != 0 || !slices.Equal(ki.Foreign, []string{"lease"}) {
			t.Errorf("%s under the lease name: Inspect = %+v, %v; want no lease held, Foreign [lease]", what, ki, err)
		}
		rdb.Del(ctx, lease)
	}
	if err := rdb.Set(ctx, lease, c, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ki, err := g.Inspect(ctx, key); err != nil || ki.LeaseFence != counter || ki.LeaseTTL <= 0 || len(ki.Foreign) != 0 {
		t.Errorf("the counter's fence as the lease: Inspect = %+v, %v; want held at fence %d", ki, err, counter)
	}
	rdb.Del(ctx, lease)
}

// TestInspectStates: stale, negative, corrupt, foreign and missing
// entries, judged on the Redis clock as the read path judges them.
func TestInspectStates(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := ctxT(t)
	g := newGroup(t, rdb, Options{Jitter: Disabled})
	value := func(context.Context) ([]byte, error) { return []byte("v"), nil }

	stale := redistest.Key(t, "stale")
	if _, err := g.Do(ctx, stale, value, WithFreshFor(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the entry to turn stale", func() bool {
		ki, err := g.Inspect(ctx, stale)
		return err == nil && ki.State == "stale" && ki.FreshLeft <= 0 && ki.StaleLeft > 0
	})

	negative := redistest.Key(t, "negative")
	if _, err := g.Do(ctx, negative, func(context.Context) ([]byte, error) { return nil, ErrNotFound }); err != ErrNotFound {
		t.Fatal(err)
	}
	garbage := redistest.Key(t, "garbage")
	rdb.Set(ctx, g.names(garbage).entry, "not an entry", time.Minute)
	wrongType := redistest.Key(t, "wrongtype")
	rdb.SAdd(ctx, g.names(wrongType).entry, "x")
	// GETRANGE answers "" for it, as for no key: it was reported missing.
	empty := redistest.Key(t, "empty")
	rdb.Set(ctx, g.names(empty).entry, "", time.Minute)
	for key, want := range map[string]string{
		negative:                    "negative",
		garbage:                     "corrupt",
		empty:                       "corrupt",
		wrongType:                   "corrupt",
		redistest.Key(t, "nothing"): "missing",
	} {
		ki, err := g.Inspect(ctx, key)
		if err != nil || ki.State != want {
			t.Errorf("Inspect(%s) = %q, %v; want %q", key, ki.State, err, want)
		}
	}
	if ki, _ := g.Inspect(ctx, wrongType); !slices.Equal(ki.Foreign, []string{"entry"}) {
		t.Errorf("Foreign = %q, want [entry]", ki.Foreign)
	}
	if _, err := g.Inspect(ctx, ""); err == nil {
		t.Error("Inspect of the empty key: no error")
	}
}

// TestInspectTag: a key with a hash tag of its own lists the tag's keys;
// once the tag is invalidated they are gone.
func TestInspectTag(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxT(t)
		g := newGroup(t, rdb, Options{})
		tag := strings.ReplaceAll(redistest.Key(t), "}", "")
		keys := []string{"{" + tag + "}a", "{" + tag + "}b", "x{" + tag + "}"}
		for _, k := range keys {
			if _, err := g.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte(k), nil }); err != nil {
				t.Fatal(err)
			}
		}
		ki, err := g.Inspect(ctx, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Sorted(slices.Values(keys))
		if ki.Tag != tag || ki.TagSize != 3 || !slices.Equal(ki.TagKeys, want) {
			t.Errorf("Inspect = tag %q, %d keys %q; want %q, 3 keys %q", ki.Tag, ki.TagSize, ki.TagKeys, tag, want)
		}
		if err := g.InvalidateTag(ctx, tag); err != nil {
			t.Fatal(err)
		}
		ki, err = g.Inspect(ctx, keys[1])
		if err != nil || ki.State != "missing" || ki.TagSize != 0 || len(ki.TagKeys) != 0 {
			t.Errorf("Inspect after InvalidateTag = %+v, %v; want missing, no tag keys", ki, err)
		}
	})
}

// TestInspectReadsOnly: Inspect writes nothing (COMMAND INFO flags none
// of the commands it sent "write"), in one round trip, on a standalone
// server and on a cluster.
func TestInspectReadsOnly(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := srv.Client(t)
		h := &rtCounter{}
		rdb := srv.Client(t)
		rdb.AddHook(h)
		inspectOnce(t, rdb, h, func() map[string]int64 { return commandCalls(t, admin) })
	})
	t.Run("cluster", func(t *testing.T) {
		h := &rtCounter{}
		rdb := redistest.SharedCluster(t).Client(t)
		rdb.OnNewNode(func(c *redis.Client) { c.AddHook(h) })
		inspectOnce(t, rdb, h, nil)
	})
}

// inspectOnce fills a tagged key, then checks that Inspect of it costs
// one round trip (h) and, when calls is set, sends no write command.
func inspectOnce(t *testing.T, rdb redis.UniversalClient, h *rtCounter, calls func() map[string]int64) {
	ctx := ctxT(t)
	g := newGroup(t, rdb, Options{HotKeys: Disabled})
	key := "{" + strings.ReplaceAll(redistest.Key(t), "}", "") + "}k"
	if _, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	var before map[string]int64
	if calls != nil {
		before = calls()
	}
	n := h.n.Load()
	ki, err := g.Inspect(ctx, key)
	if err != nil || ki.State != "fresh" {
		t.Fatalf("Inspect = %+v, %v", ki, err)
	}
	if rt := h.n.Load() - n; rt != 1 {
		t.Errorf("Inspect took %d round trips, want 1", rt)
	}
	if calls == nil {
		return
	}
	for cmd, n := range calls() {
		if n == before[cmd] || cmd == "info" {
			continue
		}
		if isWrite(t, rdb, cmd) {
			t.Errorf("Inspect sent %s, a write command", cmd)
		}
	}
}

// commandCalls returns INFO commandstats: calls by command.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(ctxT(t), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.ParseInt(n, 10, 64)
	}
	return out
}

// isWrite reports whether COMMAND INFO flags cmd ("get", "client|id") as
// one that writes.
func isWrite(t *testing.T, rdb redis.UniversalClient, cmd string) bool {
	t.Helper()
	v, err := rdb.Do(ctxT(t), "COMMAND", "INFO", cmd).Slice()
	if err != nil || len(v) != 1 {
		t.Fatalf("COMMAND INFO %s: %v %v", cmd, v, err)
	}
	info, _ := v[0].([]any)
	if len(info) < 3 {
		t.Fatalf("COMMAND INFO %s: %v", cmd, v)
	}
	flags, _ := info[2].([]any)
	return slices.Contains(flags, any("write"))
}

// TestInspectReadsForeignNamesBounded: large foreign values under a key's
// lease, fence counter and tag invalidation names cost Inspect a few
// bytes each, as the entry's and the backup lease's already did: each
// was read whole (100 MB under :lease and :fence made `stampede inspect`
// 415 MiB, and stalled Redis for its other clients 130-183 ms). They are
// still listed as foreign.
func TestInspectReadsForeignNamesBounded(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	g := newGroup(t, rdb, Options{})
	const key = "{tag}k" // a key of a tag of its own: its tag's names too
	if _, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	nm := g.names(key)
	if len(nm.keys) != 7 {
		t.Fatalf("%q has no tag names: %q", key, nm.keys)
	}
	big := strings.Repeat("7", 4<<20)
	for _, name := range []string{nm.keys[1], nm.keys[2], nm.keys[6]} {
		if err := rdb.Set(ctx, name, big, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sent := func() int64 {
		v, err := rdb.InfoMap(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v["Stats"]["total_net_output_bytes"], 10, 64)
		return n
	}
	before := sent()
	ki, err := g.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := sent() - before; n > 64<<10 {
		t.Errorf("Inspect made Redis send %d bytes for 4 MiB values under three of the key's names; want a few bytes each", n)
	}
	for _, name := range []string{"lease", "fence", "tinv"} {
		if !slices.Contains(ki.Foreign, name) {
			t.Errorf("Foreign = %q: want %s listed", ki.Foreign, name)
		}
	}
}

// TestInspectFarFreshUntil: an entry fresh until the largest time an int64
// of milliseconds holds is shown fresh for a long time, not for a
// negative one (the Duration overflowed).
func TestInspectFarFreshUntil(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := ctxT(t)
	g := newGroup(t, rdb, Options{Namespace: redistest.Key(t) + ":"})
	const key = "far"
	far := strconv.FormatInt(math.MaxInt64, 10)
	if err := rdb.Set(ctx, g.names(key).entry, "~1,"+far+","+far+",1,0,1,\nv", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ki, err := g.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ki.State != "fresh" || ki.FreshLeft < 100*365*24*time.Hour || ki.StaleLeft < ki.FreshLeft {
		t.Errorf("Inspect = state %s, fresh for %v, stale for %v; want fresh for centuries", ki.State, ki.FreshLeft, ki.StaleLeft)
	}
}
