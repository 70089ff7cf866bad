package guard

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// fuzzMaxValue is MaxValueBytes of the fuzz's "small" Group, low so that
// many generated values exercise the served-but-not-stored path.
const fuzzMaxValue = 64

// fuzzGroup is New for a fuzz target: closed when the target ends. Redis
// errors and corrupt entries are recorded in seen, so an input that makes a
// script fail is caught even though the guard would degrade quietly.
func fuzzGroup(f *testing.F, rdb redis.UniversalClient, o Options, seen *fuzzErrors) *Group {
	f.Helper()
	o.RedisTimeout = 10 * time.Second // a slow machine is not what is fuzzed
	o.Hooks.RedisError = func(op string, err error) { seen.add("redis " + op + ": " + err.Error()) }
	o.Hooks.Corrupt = func(_ string, err error) { seen.add("corrupt: " + err.Error()) }
	g, err := New(rdb, o)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = g.Close() })
	return g
}

type fuzzErrors struct {
	mu   sync.Mutex
	errs []string
}

func (e *fuzzErrors) add(s string) { e.mu.Lock(); e.errs = append(e.errs, s); e.mu.Unlock() }

func (e *fuzzErrors) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	errs := e.errs
	e.errs = nil
	return errs
}

// fuzzing reports whether this binary runs a fuzz campaign (-test.fuzz), in
// the coordinator or a worker, rather than the seed corpus.
func fuzzing() bool {
	fl := flag.Lookup("test.fuzz")
	return fl != nil && fl.Value.String() != ""
}

// FuzzKeyValue drives keys and values of arbitrary bytes through Groups on
// a real Redis (standalone and the 3-master cluster): the value comes back
// byte for byte, as a Miss, then a Hit on the same and on another Group;
// every Redis name of the key lands in one cluster slot; Invalidate drops
// it; a value over MaxValueBytes is served but not stored; an invalid key
// gets its documented error and stores nothing. Each input costs about 20
// Redis commands and deletes every name it used.
func FuzzKeyValue(f *testing.F) {
	// The odd-byte seeds are files in testdata/fuzz/FuzzKeyValue; the large
	// ones are built here rather than committed.
	f.Add("", []byte("empty key"))
	if !fuzzing() {
		// CI (go test, which runs the seeds) checks the size limits. A fuzz
		// campaign leaves these seeds out: the engine minimizes each new
		// input for a minute (-fuzzminimizetime), one Redis round of this
		// target per try, and a mutant of a 64 KiB key or a 1 MiB value
		// stalls the whole campaign there without learning about bytes.
		mib := make([]byte, 1<<20)
		for i := range mib {
			mib[i] = byte(i * 7) // every byte value, NULs and invalid UTF-8 included
		}
		f.Add("one MiB value", mib)
		f.Add(strings.Repeat("k", MaxKeyBytes), []byte("longest key"))
		f.Add(strings.Repeat("}", MaxKeyBytes), []byte("longest key, tripled by escaping"))
		f.Add(strings.Repeat("k", MaxKeyBytes+1), []byte("one byte too long"))
	}

	rdb := redistest.Shared(f).Client(f)
	crdb := redistest.SharedCluster(f).Client(f)
	// The Namespace is unique to this run, so fuzz keys never meet other
	// tests' keys on the shared servers (and vice versa).
	ns := "fuzz:" + redistest.Key(f) + ":"
	var seen fuzzErrors
	a := fuzzGroup(f, rdb, Options{Namespace: ns}, &seen)
	b := fuzzGroup(f, rdb, Options{Namespace: ns}, &seen)
	small := fuzzGroup(f, rdb, Options{Namespace: ns + "small:", MaxValueBytes: fuzzMaxValue}, &seen)
	c := fuzzGroup(f, crdb, Options{Namespace: ns}, &seen)

	f.Fuzz(func(t *testing.T, key string, value []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var loads atomic.Int64
		load := func(context.Context) ([]byte, error) { loads.Add(1); return value, nil }
		defer func() {
			if errs := seen.take(); len(errs) > 0 {
				t.Errorf("key %.40q: hooks reported %q", key, errs)
			}
		}()

		if key == "" || len(key) > MaxKeyBytes {
			fuzzInvalidKey(t, ctx, rdb, a, key, load, &loads)
			return
		}

		nm := a.names(key)
		exists := func(rdb redis.UniversalClient, names ...string) int64 {
			t.Helper()
			n, err := rdb.Exists(ctx, names...).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// Start clean and end clean: a previous run of this input (the
		// fuzzer repeats inputs) or a failure half-way leaves nothing behind.
		t.Cleanup(func() {
			ctx := context.Background()
			rdb.Del(ctx, nm.keys...)
			rdb.Del(ctx, small.names(key).keys...)
			crdb.Del(ctx, nm.keys...)
		})

		expect := func(g *Group, what string, want Status) {
			t.Helper()
			r, err := g.Do(ctx, key, load)
			if err != nil || r.Status != want || !bytes.Equal(r.Value, value) {
				t.Fatalf("key %.40q: %s: got %v, %d bytes, %v; want %v, the %d bytes loaded",
					key, what, r.Status, len(r.Value), err, want, len(value))
			}
		}

		// Standalone: miss, hit (the fast GET path), hit on another Group
		// (the script path); Redis holds exactly the bytes.
		expect(a, "first call", Miss)
		expect(a, "second call", Hit)
		expect(b, "another Group", Hit)
		if n := loads.Load(); n != 1 {
			t.Fatalf("key %.40q: loader called %d times, want 1", key, n)
		}
		raw, err := rdb.Get(ctx, nm.entry).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if e, err := entry.Decode(raw); err != nil || !bytes.Equal(e.Value, value) {
			t.Fatalf("key %.40q: stored entry does not hold the value (%v)", key, err)
		}
		if err := a.Invalidate(ctx, key); err != nil {
			t.Fatalf("key %.40q: Invalidate: %v", key, err)
		}
		if exists(rdb, nm.entry) != 0 {
			t.Fatalf("key %.40q: entry still there after Invalidate", key)
		}
		// b's in-process tier drops its copy when Redis's report of the
		// Invalidate arrives (which needs the report's name to be read
		// back as this key's entry, whatever its bytes).
		redistest.Eventually(t, 10*time.Second, "the other Group's copy dropped", func() bool {
			_, _, held := b.loc.Get(key)
			return !held
		})
		expect(b, "after Invalidate", Miss)

		// Cluster: every name of the key in one slot (CLUSTER KEYSLOT,
		// asked of the server), and the scripts, which declare all of them
		// and would fail with CROSSSLOT otherwise, work.
		pipe := crdb.Pipeline()
		slots := make([]*redis.IntCmd, len(nm.keys))
		for i, name := range nm.keys {
			slots[i] = pipe.ClusterKeySlot(ctx, name)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, s := range slots[1:] {
			if s.Val() != slots[0].Val() {
				t.Fatalf("key %.40q: %q in slot %d, entry in slot %d", key, nm.keys[i+1], s.Val(), slots[0].Val())
			}
		}
		expect(c, "cluster, first call", Miss)
		expect(c, "cluster, second call", Hit)
		if err := c.Invalidate(ctx, key); err != nil {
			t.Fatalf("key %.40q: cluster Invalidate: %v", key, err)
		}

		// Over MaxValueBytes: served to the caller, not stored (a marker
		// stands in its place), the lease given back; the node keeps its
		// copy, so the next caller is served it without a load.
		if len(value) > fuzzMaxValue {
			snm := small.names(key)
			before := loads.Load()
			expect(small, "oversized value", Miss)
			if n := exists(rdb, snm.keys[1]); n != 0 {
				t.Fatalf("key %.40q: oversized value left its lease", key)
			}
			raw, err := rdb.Get(ctx, snm.keys[0]).Bytes()
			if e, derr := entry.Decode(raw); err != nil || derr != nil || !e.Oversize || len(e.Value) != 0 {
				t.Fatalf("key %.40q: oversized value stored %q (%v, %v); want a marker", key, raw, err, derr)
			}
			expect(small, "oversized value again", Hit)
			if n := loads.Load() - before; n != 1 {
				t.Fatalf("key %.40q: oversized value loaded %d times in two calls, want 1", key, n)
			}
		}
	})
}

// fuzzInvalidKey: an empty or too long key is refused by every entry point
// with its documented error, without a load or a write.
func fuzzInvalidKey(t *testing.T, ctx context.Context, rdb redis.UniversalClient, g *Group, key string, load LoadFunc, loads *atomic.Int64) {
	t.Helper()
	want := "guard: empty key"
	if key != "" {
		want = "exceeds MaxKeyBytes"
	}
	_, doErr := g.Do(ctx, key, load)
	_, getErr := g.Get(ctx, key, load)
	invErr := g.Invalidate(ctx, key)
	for _, err := range []error{doErr, getErr, invErr} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("key of %d bytes: got %v, want an error containing %q", len(key), err, want)
		}
	}
	if n := loads.Load(); n != 0 {
		t.Fatalf("key of %d bytes: loader called %d times", len(key), n)
	}
	if n, err := rdb.Exists(ctx, g.names(key).keys...).Result(); err != nil || n != 0 {
		t.Fatalf("key of %d bytes: %d names stored (%v)", len(key), n, err)
	}
}
