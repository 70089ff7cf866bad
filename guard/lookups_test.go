package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// lookupCounter counts the lookups Hooks report: each call that is not
// Degraded reports one of Hit, Stale and Miss (Hooks.Miss).
type lookupCounter struct{ hit, stale, miss atomic.Int64 }

func (c *lookupCounter) hooks() Hooks {
	return Hooks{
		Hit:   func(string, time.Duration, bool) { c.hit.Add(1) },
		Stale: func(string, time.Duration) { c.stale.Add(1) },
		Miss:  func(string) { c.miss.Add(1) },
	}
}

func (c *lookupCounter) total() int64 { return c.hit.Load() + c.stale.Load() + c.miss.Load() }

// lookupLoads are the loader answers of TestEveryCallReportsOneLookup.
var lookupLoads = []struct {
	name string
	load LoadFunc
}{
	{"value", func(context.Context) ([]byte, error) { return []byte("v"), nil }},
	{"not found", func(context.Context) ([]byte, error) { return nil, ErrNotFound }},
	{"error", func(context.Context) ([]byte, error) { return nil, errors.New("origin down") }},
	{"pass", func(context.Context) ([]byte, error) { return nil, Pass(errors.New("private"), time.Minute) }},
	{"private", func(context.Context) ([]byte, error) { return nil, Private(errors.New("mine")) }},
}

// TestEveryCallReportsOneLookup: random histories of calls on two nodes,
// over a few keys whose loaders answer a value, a not-found, an error, a
// Pass or a Private error, some with a 1 ms fresh window: every call that
// is not Degraded reports exactly one of Hit, Stale and Miss, so that a
// lookup rate summed from the hooks counts every call. Before, a call
// answered from a remembered not-found or failure (Status Hit) and a call
// of a key marked pass reported none.
func TestEveryCallReportsOneLookup(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ns := redistest.Key(t) + ":"
	var counters [2]lookupCounter
	var groups [2]*Group
	for i := range groups {
		groups[i] = newGroup(t, rdb, Options{Namespace: ns, NegativeFor: time.Minute, ErrorBackoff: 50 * time.Millisecond,
			WaitTimeout: time.Second, Hooks: counters[i].hooks()})
	}
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	ctx := ctxT(t)
	// One node's calls in turn: each call's hooks are its own.
	for i := range 300 {
		n := r.IntN(2)
		key := fmt.Sprintf("k%d", r.IntN(6))
		ld := lookupLoads[int(key[1]-'0')%len(lookupLoads)]
		var opts []CallOption
		if r.IntN(3) == 0 {
			opts = append(opts, WithFreshFor(time.Millisecond))
		}
		before := counters[n].total()
		res, err := groups[n].Do(ctx, key, ld.load, opts...)
		if res.Status == Degraded {
			continue
		}
		if got := counters[n].total() - before; got != 1 {
			t.Fatalf("seed %d, call %d (%s, loader %q): Status %v, err %v, reported %d lookups; want 1", seed, i, key, ld.name, res.Status, err, got)
		}
	}
	// Both nodes' calls at once: totals.
	var calls, degraded atomic.Int64
	before := counters[0].total() + counters[1].total()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)+2))
			for range 60 {
				key := fmt.Sprintf("c%d", r.IntN(6))
				ld := lookupLoads[int(key[1]-'0')%len(lookupLoads)]
				res, _ := groups[w%2].Do(ctx, key, ld.load, WithFreshFor(time.Duration(r.IntN(3))*time.Millisecond+time.Millisecond))
				calls.Add(1)
				if res.Status == Degraded {
					degraded.Add(1)
				}
			}
		})
	}
	wg.Wait()
	got := counters[0].total() + counters[1].total() - before
	if want := calls.Load() - degraded.Load(); got != want {
		t.Errorf("seed %d: %d concurrent calls (%d degraded) reported %d lookups; want %d", seed, calls.Load(), degraded.Load(), got, want)
	}
}

// TestAnswerPredicates: IsPass and IsRevalidated tell a loader's answers
// from its failures, through wrapping and joins, without allocating (the
// metrics adapters ask on every load).
func TestAnswerPredicates(t *testing.T) {
	boom := errors.New("boom")
	pass, reval := Pass(boom, time.Second), Revalidated(nil, 0)
	for _, tt := range []struct {
		err         error
		pass, reval bool
	}{
		{nil, false, false},
		{boom, false, false},
		{pass, true, false},
		{fmt.Errorf("handler: %w", pass), true, false},
		{errors.Join(boom, pass), true, false},
		{Private(boom), false, false},
		{NoStore(boom), false, false},
		{reval, false, true},
		{fmt.Errorf("origin: %w", reval), false, true},
		{errors.Join(boom, reval), false, true},
		{ErrNotFound, false, false},
	} {
		if got := IsPass(tt.err); got != tt.pass {
			t.Errorf("IsPass(%v) = %v, want %v", tt.err, got, tt.pass)
		}
		if got := IsRevalidated(tt.err); got != tt.reval {
			t.Errorf("IsRevalidated(%v) = %v, want %v", tt.err, got, tt.reval)
		}
	}
	wrapped := fmt.Errorf("handler: %w", pass)
	if n := testing.AllocsPerRun(100, func() { IsPass(wrapped); IsRevalidated(wrapped) }); n != 0 {
		t.Errorf("IsPass and IsRevalidated allocate %v times, want 0", n)
	}
}
