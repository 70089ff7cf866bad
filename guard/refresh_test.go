package guard

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestEarlyRefresh: with a large beta, a fresh hit whose stored load
// duration is long next to its remaining fresh time refreshes it in the
// background; with beta 0 nothing is refreshed early.
func TestEarlyRefresh(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, beta := range []float64{0, 1e9} {
			var loads atomic.Int64
			g := newGroup(t, rdb, Options{EarlyRefreshBeta: beta})
			key := redistest.Key(t, strconv.FormatFloat(beta, 'g', -1, 64))
			putEntry(t, rdb, g, key, "old", 60_000, 120_000, 1)
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { loads.Add(1); return []byte("new"), nil })
			if err != nil || r.Status != Hit || string(r.Value) != "old" {
				t.Fatalf("beta %v: %v %q %v, want hit old", beta, r.Status, r.Value, err)
			}
			g.bg.Wait()
			want := int64(0)
			if beta > 0 {
				want = 1
			}
			if loads.Load() != want {
				t.Fatalf("beta %v: %d early refreshes, want %d", beta, loads.Load(), want)
			}
			if beta > 0 {
				if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || string(r.Value) != "new" {
					t.Fatalf("after the early refresh: %q %v", r.Value, err)
				}
			}
		}
	})
}

// TestStaleIfError: a failing refresh keeps the stale value served and holds
// the lease for ErrorBackoff, so no node calls the failing loader at once.
func TestStaleIfError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var refreshErrs counter
		var loads counter
		a := newGroup(t, rdb, Options{ErrorBackoff: time.Minute, Hooks: Hooks{
			RefreshError: func(string, error) { refreshErrs.add() },
		}})
		b := newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		putEntry(t, rdb, a, key, "old", -1, 60_000, 1)
		failing := func(context.Context) ([]byte, error) { loads.add(); return nil, errors.New("db down") }
		r, err := a.Do(ctxT(t), key, failing)
		if err != nil || r.Status != Stale || string(r.Value) != "old" {
			t.Fatalf("got %v %q %v, want stale old", r.Status, r.Value, err)
		}
		redistest.Eventually(t, 10*time.Second, "the refresh to fail", func() bool { return refreshErrs.n.Load() == 1 })
		pttl, err := a.rdb.PTTL(ctxT(t), a.names(key).keys[1]).Result()
		if err != nil || pttl < 50*time.Second {
			t.Fatalf("lease PTTL %v (%v) after the failure, want held for the back-off", pttl, err)
		}
		for _, g := range []*Group{a, b} {
			r, err := g.Do(ctxT(t), key, failing)
			if err != nil || r.Status != Stale || string(r.Value) != "old" {
				t.Fatalf("during back-off: %v %q %v, want stale old", r.Status, r.Value, err)
			}
		}
		if loads.n.Load() != 1 {
			t.Fatalf("failing loader called %d times, want 1", loads.n.Load())
		}
	})
}

// TestXFetchDraw: the early-refresh draw is certain once the value is due,
// never for a value with no recorded load time, and rarer the more of its
// fresh window is left (exp(-remaining/(beta*delta))).
func TestXFetchDraw(t *testing.T) {
	g := &Group{opts: Options{EarlyRefreshBeta: 1}}
	const draws = 20000
	rate := func(e entry.Entry, now int64) float64 {
		n := 0
		for range draws {
			if g.earlyRefreshDue(e, now) {
				n++
			}
		}
		return float64(n) / draws
	}
	e := entry.Entry{FreshUntil: 10_000, LoadDur: 100 * time.Millisecond}
	if r := rate(e, 10_000); r != 1 {
		t.Fatalf("at fresh-until: rate %v, want 1", r)
	}
	if r := rate(entry.Entry{FreshUntil: 10_000}, 9_999); r != 0 {
		t.Fatalf("no load time: rate %v, want 0", r)
	}
	for _, c := range []struct {
		remaining int64 // ms
		want      float64
	}{{100, math.Exp(-1)}, {200, math.Exp(-2)}, {50, math.Exp(-0.5)}} {
		if r := rate(e, e.FreshUntil-c.remaining); math.Abs(r-c.want) > 0.02 {
			t.Errorf("%d ms left: rate %.3f, want %.3f", c.remaining, r, c.want)
		}
	}
	neg := e
	neg.Negative = true
	if r := rate(neg, 10_000); r != 0 {
		t.Fatalf("negative entry: rate %v, want 0", r)
	}
}
