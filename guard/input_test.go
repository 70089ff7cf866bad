package guard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Bad input, entry point by entry point. TestBadInput (failure_test.go)
// covers Do; this file covers every entry point, per-call options, Options
// fields, nil Groups and loaders, and what is found under a key's names in
// Redis. A rejected call must return an error that names the problem, store
// nothing and leave no goroutine behind.

// nsSeq makes each row's Namespace unique in this test binary (the shared
// server lives as long as the binary), so a scan of it sees only the row's
// keys.
var nsSeq atomic.Int64

func rowNamespace() string { return fmt.Sprintf("badinput%d:", nsSeq.Add(1)) }

// namespaceKeys returns every key under ns (ns holds no glob characters).
func namespaceKeys(t *testing.T, rdb redis.UniversalClient, ns string) []string {
	t.Helper()
	keys, err := rdb.Keys(ctxT(t), ns+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// entryPoint calls one of the ways into a Group with a given context, key,
// loader and call options. load nil means "no loader" (for Fetch and Wrap: a
// nil func of their own type).
type entryPoint struct {
	name string
	call func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error
}

var entryPoints = []entryPoint{
	{"Do", func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error {
		_, err := g.Do(ctx, key, load, opts...)
		return err
	}},
	{"Get", func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error {
		_, err := g.Get(ctx, key, load, opts...)
		return err
	}},
	{"Fetch", func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error {
		_, err := Fetch(ctx, g, key, typed(load), opts...)
		return err
	}},
	{"Wrap", func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error {
		f := Wrap(g, func(k string) string { return k }, func(ctx context.Context, _ string) (string, error) {
			return typed(load)(ctx)
		}, opts...)
		_, err := f(ctx, key)
		return err
	}},
	{"Invalidate", func(ctx context.Context, g *Group, key string, _ LoadFunc, _ ...CallOption) error {
		return g.Invalidate(ctx, key)
	}},
	// The batches get a good key before the row's: validation comes before
	// any work.
	{"GetMany", func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error {
		_, err := g.GetMany(ctx, []string{"good", key}, batched(load), opts...)
		return err
	}},
	{"FetchMany", func(ctx context.Context, g *Group, key string, load LoadFunc, opts ...CallOption) error {
		var typedLoad func(context.Context, []string) (map[string]string, error)
		if bl := batched(load); bl != nil {
			typedLoad = func(ctx context.Context, ids []string) (map[string]string, error) {
				m, err := bl(ctx, ids)
				out := make(map[string]string, len(m))
				for k, v := range m {
					out[k] = string(v)
				}
				return out, err
			}
		}
		_, err := FetchMany(ctx, g, []string{"good", key}, func(id string) string { return id }, typedLoad, opts...)
		return err
	}},
}

// batched adapts a LoadFunc to a BatchLoadFunc; nil stays nil.
func batched(load LoadFunc) BatchLoadFunc {
	if load == nil {
		return nil
	}
	return func(ctx context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			v, err := load(ctx)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
}

// typed adapts a LoadFunc to Fetch's loader type; nil stays nil.
func typed(load LoadFunc) func(context.Context) (string, error) {
	if load == nil {
		return nil
	}
	return func(ctx context.Context) (string, error) {
		b, err := load(ctx)
		return string(b), err
	}
}

func TestBadCallsEveryEntryPoint(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	var nilCtx context.Context

	type row struct {
		name    string
		ep      entryPoint
		closed  bool // Close the Group before the call
		nilG    bool // call with a nil *Group
		ctx     context.Context
		key     string
		nilLoad bool
		opts    []CallOption
		want    string // substring of the error
		is      error  // errors.Is target, when set
	}
	var rows []row
	add := func(r row) {
		if r.ctx == nil && r.name != "nil context" {
			r.ctx = context.Background() // a live context; the row sets its own otherwise
		}
		if r.key == "" && r.name != "empty key" {
			r.key = "k"
		}
		rows = append(rows, r)
	}
	for _, ep := range entryPoints {
		add(row{name: "closed Group", ep: ep, closed: true, want: "closed", is: ErrClosed})
		add(row{name: "cancelled", ep: ep, ctx: cancelled, want: "canceled", is: context.Canceled})
		add(row{name: "deadline exceeded", ep: ep, ctx: expired, want: "deadline exceeded", is: context.DeadlineExceeded})
		add(row{name: "nil context", ep: ep, ctx: nilCtx, want: "nil context"})
		add(row{name: "empty key", ep: ep, want: "empty key"})
		add(row{name: "huge key", ep: ep, key: strings.Repeat("k", MaxKeyBytes+1), want: "exceeds MaxKeyBytes"})
		if ep.name != "Invalidate" {
			add(row{name: "WithFreshFor(-1)", ep: ep, opts: []CallOption{WithFreshFor(-1)}, want: "negative WithFreshFor -1ns"})
			add(row{name: "WithStaleFor(-1s)", ep: ep, opts: []CallOption{WithStaleFor(-time.Second)}, want: "negative WithStaleFor -1s"})
			add(row{name: "valid then negative option", ep: ep, opts: []CallOption{WithFreshFor(time.Second), WithStaleFor(-2)}, want: "negative WithStaleFor"})
		}
		if ep.name != "Wrap" { // Wrap refuses a nil Group when built: TestWrapPanicsOnNil
			add(row{name: "nil Group", ep: ep, nilG: true, want: "nil Group"})
		}
	}
	add(row{name: "nil loader", ep: entryPoints[0], nilLoad: true, want: "nil LoadFunc"})
	add(row{name: "nil loader", ep: entryPoints[1], nilLoad: true, want: "nil LoadFunc"})
	add(row{name: "nil loader", ep: entryPoints[2], nilLoad: true, want: "nil load func"})
	add(row{name: "nil loader", ep: entryPoints[5], nilLoad: true, want: "nil BatchLoadFunc"})
	add(row{name: "nil loader", ep: entryPoints[6], nilLoad: true, want: "nil load func"})

	for _, r := range rows {
		t.Run(r.ep.name+"/"+r.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			ns := rowNamespace()
			var g *Group
			if !r.nilG {
				var err error
				if g, err = New(rdb, Options{Namespace: ns}); err != nil {
					t.Fatal(err)
				}
				defer g.Close() // before the leak check (defers run last-in first-out)
				if r.closed {
					if err := g.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			var loads atomic.Int64
			load := LoadFunc(func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil })
			if r.nilLoad {
				load = nil
			}
			err := r.ep.call(r.ctx, g, r.key, load, r.opts...)
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("got %v, want an error containing %q", err, r.want)
			}
			if r.is != nil && !errors.Is(err, r.is) {
				t.Fatalf("got %v, want errors.Is %v", err, r.is)
			}
			if n := loads.Load(); n != 0 {
				t.Fatalf("the loader ran %d times for a rejected call", n)
			}
			if keys := namespaceKeys(t, rdb, ns); len(keys) != 0 {
				t.Fatalf("a rejected call stored %q", keys)
			}
		})
	}
}

// TestCorruptEntryKinds: every kind of undecodable entry (the decoder's
// table in entry_test.go) found in Redis is a miss: it is reported to
// Hooks.Corrupt with an error naming the problem, the caller gets the
// loaded value, and the fill overwrites the garbage.
func TestCorruptEntryKinds(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var mu sync.Mutex
	var reported []error
	g, err := New(rdb, Options{Hooks: Hooks{Corrupt: func(_ string, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range entry.Corrupt {
		t.Run(c.Name, func(t *testing.T) {
			key := redistest.Key(t)
			nm := g.names(key)
			if err := rdb.Set(ctxT(t), nm.entry, c.Raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			reported = nil
			mu.Unlock()
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("good"), nil })
			if err != nil || r.Status != Miss || string(r.Value) != "good" {
				t.Fatalf("over %q: %v %q %v; want a miss loading good", c.Raw, r.Status, r.Value, err)
			}
			mu.Lock()
			got := reported
			mu.Unlock()
			if len(got) == 0 {
				t.Fatalf("corrupt entry %q not reported", c.Raw)
			}
			for _, err := range got {
				if !errors.Is(err, entry.ErrCorrupt) || !strings.Contains(err.Error(), c.Why) {
					t.Fatalf("reported %v; want errCorrupt naming %q", err, c.Why)
				}
			}
			raw, err := rdb.Get(ctxT(t), nm.entry).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if e, err := entry.Decode(raw); err != nil || string(e.Value) != "good" {
				t.Fatalf("after the fill Redis holds %q (%v); want the new entry", raw, err)
			}
			rdb.Del(ctxT(t), nm.keys...)
		})
	}
}

// TestWrongTypeUnderKeyName: something other than the guard wrote a hash
// under one of a key's names. Callers still get the loader's value, at once
// (with WaitTimeout a minute and ReturnError, a caller kept waiting would
// fail), the trouble is reported (a WRONGTYPE Redis error, or the Corrupt
// hook for the names whose foreign values the scripts drop), and (the
// point) the breaker stays closed: one poisoned key is not a Redis outage,
// so the Group's other keys keep being coordinated through Redis.
func TestWrongTypeUnderKeyName(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	for i, name := range []string{"entry", "lease", "fence", "waiters", "inv"} {
		t.Run(name, func(t *testing.T) {
			var wrongType, breakerOpened, busy atomic.Int64
			g := newGroup(t, rdb, Options{
				WaitTimeout:       time.Minute,
				WaitTimeoutPolicy: ReturnError,
				Hooks: Hooks{
					RedisError: func(_ string, err error) {
						if redis.HasErrorPrefix(err, "WRONGTYPE") {
							wrongType.Add(1)
						}
					},
					Corrupt: func(string, error) { wrongType.Add(1) },
					Lease: func(_ string, won bool) {
						if !won {
							busy.Add(1) // a caller found a holder to wait for
						}
					},
					Breaker: func(open bool) {
						if open {
							breakerOpened.Add(1)
						}
					},
				},
			})
			key := redistest.Key(t)
			nm := g.names(key)
			if err := rdb.HSet(ctxT(t), nm.keys[i], "f", "v").Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Del(context.Background(), nm.keys...) })
			// More calls than BreakerFailures (3): before the fix the fourth
			// found the breaker open.
			for range 5 {
				r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil })
				if err != nil || string(r.Value) != "v" {
					t.Fatalf("got %v %q %v; want the loaded value", r.Status, r.Value, err)
				}
			}
			if wrongType.Load() == 0 {
				t.Fatal("neither a WRONGTYPE error nor a corrupt value reported")
			}
			if n := breakerOpened.Load(); n != 0 {
				t.Fatalf("the breaker opened %d times over one poisoned key", n)
			}
			if n := busy.Load(); n != 0 {
				t.Fatalf("%d calls found the lease held by nobody's load and waited for it", n)
			}
			healthy := redistest.Key(t, "healthy")
			for _, want := range []Status{Miss, Hit} {
				r, err := g.Do(ctxT(t), healthy, func(context.Context) ([]byte, error) { return []byte("h"), nil })
				if err != nil || r.Status != want {
					t.Fatalf("another key: %v, %v; want %v through Redis", r.Status, err, want)
				}
			}
		})
	}
}

// TestHugeWaitTimeout: WaitTimeout set to the largest duration ("wait as
// long as my ctx allows") is valid. The waiters' set in Redis lives
// WaitTimeout+LockTTL, which must saturate rather than overflow into a
// negative wait the read script rejects, degrading every call.
func TestHugeWaitTimeout(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var redisErrs atomic.Int64
	g := newGroup(t, rdb, Options{WaitTimeout: math.MaxInt64, LockTTL: math.MaxInt64, Hooks: Hooks{
		RedisError: func(string, error) { redisErrs.Add(1) },
	}})
	key := redistest.Key(t)
	for _, want := range []Status{Miss, Hit} {
		r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil })
		if err != nil || r.Status != want || string(r.Value) != "v" {
			t.Fatalf("got %v %q %v; want %v", r.Status, r.Value, err, want)
		}
	}
	if n := redisErrs.Load(); n != 0 {
		t.Fatalf("%d Redis errors", n)
	}
}

// TestCorruptEntryIsAMiss: garbage under a key is reported, loaded over,
// never a panic.
func TestCorruptEntryIsAMiss(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var corrupt counter
		g := newGroup(t, rdb, Options{Hooks: Hooks{Corrupt: func(string, error) { corrupt.add() }}})
		key := redistest.Key(t)
		for _, garbage := range []string{"garbage", "~1,99999999999999999999,1,1,1,1,\nx", "~1,1,1,1,1,1,zz\n", "~2,1,2,3,4,5,\nx"} {
			if err := rdb.Set(ctxT(t), g.names(key).entry, garbage, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			before := corrupt.n.Load()
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("good"), nil })
			if err != nil || string(r.Value) != "good" {
				t.Fatalf("over %q: got %q, %v", garbage, r.Value, err)
			}
			if corrupt.n.Load() == before {
				t.Fatalf("corrupt entry %q not reported", garbage)
			}
			if r, err := g.Do(ctxT(t), key, nil2); err != nil || r.Status != Hit || string(r.Value) != "good" {
				t.Fatalf("after overwriting %q: %v %q %v", garbage, r.Status, r.Value, err)
			}
		}
	})
}

// TestNewRejects: New refuses what would make a Group misbehave later,
// with an error saying why. (Negative Options fields: TestNegativeOptionFields.)
func TestNewRejects(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	blocking := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer blocking.Close()
	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
		o    Options
		want string
	}{
		{"nil client", nil, Options{}, "nil Redis client"},
		{"client ignoring ctx deadlines", blocking, Options{}, "ContextTimeoutEnabled"},
		{"namespace with a brace", rdb, Options{Namespace: "a{b"}, "Namespace"},
		{"jitter of 2", rdb, Options{Jitter: 2}, "Jitter"},
		{"jitter NaN", rdb, Options{Jitter: math.NaN()}, "Jitter"},
		{"early refresh beta NaN", rdb, Options{EarlyRefreshBeta: math.NaN()}, "EarlyRefreshBeta"},
		{"early refresh beta +Inf", rdb, Options{EarlyRefreshBeta: math.Inf(1)}, "EarlyRefreshBeta"},
		{"unknown wait policy", rdb, Options{WaitTimeoutPolicy: 7}, "WaitTimeoutPolicy"},
		{"lease under 3ms", rdb, Options{LockTTL: time.Millisecond}, "LockTTL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := New(c.rdb, c.o)
			if err == nil || g != nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %v, %v; want no Group and an error naming %q", g, err, c.want)
			}
		})
	}
}

// TestOddByteKeys: any bytes make a key, braces, NUL and invalid UTF-8
// included (the entry names escape them; TestNamesShareOneTag).
func TestOddByteKeys(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{})
	for _, k := range []string{"{", "}", "a}b{c", "\x00\xff", "%7D"} {
		if r, err := g.Do(ctxT(t), k, func(context.Context) ([]byte, error) { return []byte(k), nil }); err != nil || string(r.Value) != k {
			t.Fatalf("key %q: %q %v", k, r.Value, err)
		}
	}
}

// TestNewTypedNilClient: New given a typed nil client (a nil pointer behind
// the interface) returns an error saying so instead of panicking.
func TestNewTypedNilClient(t *testing.T) {
	type wrapped struct{ redis.UniversalClient }
	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
	}{
		{"*redis.Client", (*redis.Client)(nil)},
		{"*redis.ClusterClient", (*redis.ClusterClient)(nil)},
		{"*redis.Ring", (*redis.Ring)(nil)},
		{"a nil pointer of the caller's type", (*wrapped)(nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var g *Group
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panicked: %v", p)
					}
				}()
				g, err = New(c.rdb, Options{})
			}()
			if g != nil || err == nil || !strings.Contains(err.Error(), "nil Redis client") {
				t.Fatalf("New = %v, %v; want an error naming the nil Redis client", g, err)
			}
		})
	}
}
