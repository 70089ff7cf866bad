package guard

import (
	"context"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// ownHotWindows stops g's window loop and gives g a fresh tracker that
// no loop drains, so that the test ends its windows itself.
func ownHotWindows(g *Group) *hotTracker {
	old := g.hot
	old.close()
	g.hot = newHotTracker(g.opts)
	close(g.hot.done) // no loop: Close has none to wait for
	return g.hot
}

// hotWorkload makes calls of 200 keys on g, one key taking half of them,
// and loads each key once.
func hotWorkload(t *testing.T, g *Group, hot string, calls int) {
	t.Helper()
	ctx := ctxT(t)
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i := range calls {
		key := hot
		if i%2 == 1 {
			key = hot + ":cold:" + strconv.Itoa(i%199)
		}
		if _, err := g.Do(ctx, key, load); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHotKeysWindow: a key taking half the calls of 200 keys is first by
// calls in the Group's window, in its hook, and in the view it publishes,
// which another Group of the Namespace reads back.
func TestHotKeysWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ns := strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"
		var hooked []HotKeys
		var mu sync.Mutex
		g, err := New(rdb, Options{Namespace: ns, RedisTimeout: 5 * time.Second,
			Hooks: Hooks{HotKeys: func(hk HotKeys) { mu.Lock(); hooked = append(hooked, hk); mu.Unlock() }}})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		h := ownHotWindows(g)
		hot := redistest.Key(t, "hot")
		hotWorkload(t, g, hot, 8000)
		g.endHotWindow(h, time.Second)

		hk := g.HotKeys()
		if len(hk.Calls) == 0 || hk.Calls[0].Key != hot {
			t.Fatalf("HotKeys().Calls = %v, want %q first", head(hk.Calls), hot)
		}
		// Sampled, each sample weighed: about 4,000 calls per second
		// (a tier hit one in 64: some 62 samples, 13% apart).
		if r := hk.Calls[0].PerSecond; r < 2000 || r > 6000 {
			t.Errorf("the hot key's rate is %.0f/s, want about 4000", r)
		}
		if got, want := len(hk.Loads), g.opts.HotKeys; got != want {
			t.Errorf("%d keys by loads, want %d (200 keys loaded once each)", got, want)
		}
		if len(hk.Calls) > g.opts.HotKeys {
			t.Errorf("%d keys by calls, want at most HotKeys = %d", len(hk.Calls), g.opts.HotKeys)
		}
		mu.Lock()
		if len(hooked) != 1 || hooked[0].Calls[0].Key != hot {
			t.Errorf("Hooks.HotKeys got %d windows, want 1 with %q first", len(hooked), hot)
		}
		mu.Unlock()

		reader, err := New(rdb, Options{Namespace: ns, HotKeys: Disabled, LocalEntries: Disabled})
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Close()
		fleet, err := reader.FleetHotKeys(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if fleet.Nodes != 1 || len(fleet.Calls) == 0 || fleet.Calls[0] != hk.Calls[0] {
			t.Fatalf("FleetHotKeys = %d nodes, %v; want 1 node with %v first", fleet.Nodes, head(fleet.Calls), hk.Calls[0])
		}
		// Every name published expires.
		index, prefix := hotNames(ns)
		for _, name := range []string{index, prefix + h.node} {
			if ttl := rdb.PTTL(ctxT(t), name).Val(); ttl <= 0 || ttl > 3*time.Second {
				t.Errorf("PTTL %s = %v, want (0, 3s]: three windows", name, ttl)
			}
		}
	})
}

// TestFleetHotKeysMerges: two Groups publish their windows; the fleet's
// view sums a key's rates over them.
func TestFleetHotKeysMerges(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ns := strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"
	a := newGroup(t, rdb, Options{Namespace: ns})
	b := newGroup(t, rdb, Options{Namespace: ns})
	ha, hb := ownHotWindows(a), ownHotWindows(b)
	for range 800 {
		ha.calls.Add("both")
		hb.calls.Add("both")
		ha.calls.Add("only-a")
	}
	hb.loads.Add("only-b")
	a.endHotWindow(ha, time.Second)
	b.endHotWindow(hb, time.Second)

	fleet, err := a.FleetHotKeys(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []HotKey{{"both", 2 * 800}, {"only-a", 800}}
	if fleet.Nodes != 2 || len(fleet.Calls) != 2 || fleet.Calls[0] != want[0] || fleet.Calls[1] != want[1] {
		t.Errorf("FleetHotKeys().Calls = %v from %d nodes, want %v from 2", fleet.Calls, fleet.Nodes, want)
	}
	if len(fleet.Loads) != 1 || fleet.Loads[0] != (HotKey{"only-b", 1}) {
		t.Errorf("FleetHotKeys().Loads = %v, want [only-b 1/s]", fleet.Loads)
	}
}

// TestHotKeysIdleWindowPublishesNothing: a window without calls writes
// nothing to Redis.
func TestHotKeysIdleWindowPublishesNothing(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ns := strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"
	g := newGroup(t, rdb, Options{Namespace: ns})
	h := ownHotWindows(g)
	g.endHotWindow(h, time.Second)
	index, _ := hotNames(ns)
	if n := rdb.Exists(ctxT(t), index, h.name).Val(); n != 0 {
		t.Errorf("%d names published after an idle window, want 0", n)
	}
	if hk := g.HotKeys(); len(hk.Calls)+len(hk.Loads) != 0 || hk.Nodes != 1 {
		t.Errorf("HotKeys() = %+v, want none from 1 node", hk)
	}
}

// TestHotKeysOptions: Disabled turns them off (no tracker, nothing
// counted); the bounds are checked.
func TestHotKeysOptions(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{HotKeys: Disabled})
	if g.hot != nil {
		t.Fatal("HotKeys: Disabled still tracks")
	}
	if _, err := g.Do(ctxT(t), redistest.Key(t), func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	if hk := g.HotKeys(); hk.Nodes != 0 || len(hk.Calls) != 0 {
		t.Errorf("HotKeys() with HotKeys: Disabled = %+v, want zero", hk)
	}
	if d := newGroup(t, rdb, Options{}); d.opts.HotKeys != defaultHotKeys {
		t.Errorf("default HotKeys = %d, want %d", d.opts.HotKeys, defaultHotKeys)
	}
	for _, n := range []int{-2, maxHotKeys + 1} {
		if _, err := New(rdb, Options{HotKeys: n}); err == nil || !strings.Contains(err.Error(), "HotKeys") {
			t.Errorf("New with HotKeys %d: %v, want an error naming HotKeys", n, err)
		}
	}
}

// TestShortKey: long keys are cut on a character boundary and stay apart.
func TestShortKey(t *testing.T) {
	long := strings.Repeat("é", 300)
	a, b := shortKey(long), shortKey(long+"x")
	if len(a) > maxHotKeyBytes || a == b || !strings.HasPrefix(long, strings.Split(a, "…")[0]) {
		t.Errorf("shortKey: %q and %q", a, b)
	}
	if got := shortKey("short"); got != "short" {
		t.Errorf("shortKey(short) = %q", got)
	}
}

func head(ks []HotKey) []HotKey { return ks[:min(len(ks), 3)] }

// BenchmarkHitHotKeys is BenchmarkHit (a tier hit, default Options) on
// Groups with hot keys off and on, interleaved in chunks of 1,000 calls,
// each first in turn, so that a machine whose speed drifts weighs on both
// alike: it reports each side's ns per hit and the difference. "feed" is
// what a tier hit adds for them, alone.
//
//	go test -run '^$' -bench HitHotKeys -count 10 ./guard
func BenchmarkHitHotKeys(b *testing.B) {
	b.Run("interleaved", func(b *testing.B) {
		rdb := redistest.Shared(b).Client(b)
		ctx := context.Background()
		load := func(context.Context) ([]byte, error) { return make([]byte, 256), nil }
		// off, on, on, off: no Group's place in the loop favours a side.
		hot := []int{Disabled, 0, 0, Disabled}
		groups := make([]*Group, len(hot))
		for i, n := range hot {
			g, err := New(rdb, Options{HotKeys: n})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			groups[i] = g
		}
		key := redistest.Key(b)
		for _, g := range groups {
			if _, err := g.Do(ctx, key, load); err != nil {
				b.Fatal(err)
			}
		}
		const chunk = 1000
		var took [2]time.Duration // off, on
		var calls int
		for b.Loop() {
			for j := range groups {
				i := (j + calls/chunk) % len(groups) // each first in turn
				start := time.Now()
				for range chunk {
					if r, err := groups[i].Do(ctx, key, load); err != nil || r.Status != Hit {
						b.Fatal(r.Status, err)
					}
				}
				took[min(hot[i]+1, 1)] += time.Since(start)
			}
			calls += 2 * chunk
		}
		off, on := float64(took[0])/float64(calls), float64(took[1])/float64(calls)
		b.ReportMetric(off, "ns/hit-off")
		b.ReportMetric(on, "ns/hit-on")
		b.ReportMetric(100*(on-off)/off, "%-more")
	})
	// What a tier hit adds, alone: hits of 1,024 keys, Zipf-distributed
	// as hot keys are, with hot keys off (the loop's own cost) and on.
	z := mrand.NewZipf(mrand.New(mrand.NewPCG(1, 2)), 1.2, 1, 1023)
	seq := make([]string, 4096)
	for i := range seq {
		seq[i] = "user:" + strconv.FormatUint(z.Uint64(), 10)
	}
	for _, on := range []bool{false, true} {
		name := "feed/hotkeys=off"
		var h *hotTracker
		if on {
			name = "feed/hotkeys=on"
			h = newHotTracker(Options{Namespace: "bench:", HotKeys: defaultHotKeys})
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// A tier hit's clock, some 200 ns after the last.
				h.tierHit(seq[i&4095], int64(i)*211)
				i++
			}
		})
	}
}

// TestCloseClearsHotKeys: a closed Group has no hot key: Close reports an
// empty window to Hooks.HotKeys, and HotKeys() is empty. Before, the last
// window stayed, and a gauge fed by the hook showed its rates for as long
// as the process served its metrics.
func TestCloseClearsHotKeys(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ns := strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"
	var mu sync.Mutex
	var hooked []HotKeys
	g, err := New(rdb, Options{Namespace: ns,
		Hooks: Hooks{HotKeys: func(hk HotKeys) { mu.Lock(); hooked = append(hooked, hk); mu.Unlock() }}})
	if err != nil {
		t.Fatal(err)
	}
	h := ownHotWindows(g)
	hot := redistest.Key(t, "hot")
	hotWorkload(t, g, hot, 2000)
	g.endHotWindow(h, time.Second)
	if hk := g.HotKeys(); len(hk.Calls) == 0 || hk.Calls[0].Key != hot {
		t.Fatalf("HotKeys().Calls = %v, want %q first", head(hk.Calls), hot)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if hk := g.HotKeys(); len(hk.Calls)+len(hk.Loads) != 0 {
		t.Errorf("HotKeys() after Close = %v calls, %v loads; want none", head(hk.Calls), head(hk.Loads))
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(hooked); n != 2 || len(hooked[1].Calls)+len(hooked[1].Loads) != 0 {
		t.Errorf("Hooks.HotKeys got %d windows, the last %+v; want 2, the last (Close's) empty", n, hooked[n-1])
	}
}
