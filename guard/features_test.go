package guard

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

func nil2Loader(t *testing.T) LoadFunc {
	return func(context.Context) ([]byte, error) {
		return nil, errors.New("loader must not run")
	}
}

// TestLocalTier: with LocalEntries set, a repeated hit costs no round trip;
// Invalidate drops the local copy.
func TestLocalTier(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	hook := &cmdCounter{}
	rdb.AddHook(hook)
	g := newGroup(t, rdb, Options{LocalEntries: 16, LocalTTL: time.Minute})
	key := redistest.Key(t)
	if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || r.Status != Hit {
		t.Fatalf("%v %v", r.Status, err)
	}
	before := hook.n.Load()
	for range 10 {
		if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || r.Status != Hit || string(r.Value) != "v" {
			t.Fatalf("%v %q %v", r.Status, r.Value, err)
		}
	}
	if n := hook.n.Load() - before; n != 0 {
		t.Fatalf("local hits sent %d commands, want 0", n)
	}
	if err := g.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("w"), nil }); err != nil || string(r.Value) != "w" {
		t.Fatalf("after Invalidate: %q %v", r.Value, err)
	}
}

// TestFetchAndWrap: typed values round-trip through Redis as JSON, and []byte
// and string as they are.
func TestFetchAndWrap(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{})
	type user struct {
		ID   int
		Name string
	}
	var loads atomic.Int64
	getUser := Wrap(g, func(id int) string { return "user:" + strconv.Itoa(id) },
		func(_ context.Context, id int) (user, error) {
			loads.Add(1)
			return user{ID: id, Name: "u" + strconv.Itoa(id)}, nil
		})
	for range 3 {
		u, err := getUser(ctxT(t), 7)
		if err != nil || u != (user{7, "u7"}) {
			t.Fatalf("got %+v, %v", u, err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("%d loads, want 1", loads.Load())
	}
	s, err := Fetch(ctxT(t), g, "s", func(context.Context) (string, error) { return "plain", nil })
	if err != nil || s != "plain" {
		t.Fatalf("%q %v", s, err)
	}
	raw, err := rdb.Get(ctxT(t), g.names("s").entry).Bytes()
	if e, derr := decodeEntry(raw); err != nil || derr != nil || string(e.value) != "plain" {
		t.Fatalf("string stored as %q (%v, %v), want it as is", e.value, err, derr)
	}
	if _, err := Fetch(ctxT(t), g, "bad", func(context.Context) (func(), error) { return func() {}, nil }); err == nil {
		t.Fatal("a value JSON cannot encode was accepted")
	}
}

// TestWaitTimeoutPolicy: when the lease holder never fills, a waiter gives
// up after WaitTimeout and, by default, loads itself; with ReturnError it
// returns ErrWaitTimeout.
func TestWaitTimeoutPolicy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, policy := range []WaitTimeoutPolicy{LoadLocally, ReturnError} {
			g := newGroup(t, rdb, Options{WaitTimeout: 200 * time.Millisecond, WaitTimeoutPolicy: policy})
			key := redistest.Key(t, strconv.Itoa(int(policy)))
			// A holder that never fills: a lease taken directly.
			if err := rdb.Set(ctxT(t), g.names(key).keys[1], "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("local"), nil })
			switch policy {
			case LoadLocally:
				if err != nil || string(r.Value) != "local" {
					t.Fatalf("LoadLocally: %q %v", r.Value, err)
				}
			case ReturnError:
				if !errors.Is(err, ErrWaitTimeout) {
					t.Fatalf("ReturnError: %v, want ErrWaitTimeout", err)
				}
			}
		}
	})
}

// TestNoStore: an answer marked NoStore reaches the flight's callers, is not
// stored, and frees the lease at once, so the next call loads again.
func TestNoStore(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{ErrorBackoff: time.Minute})
	key := redistest.Key(t)
	private := errors.New("private response")
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return nil, NoStore(private) }
	for range 2 {
		if _, err := g.Do(ctxT(t), key, load); !errors.Is(err, private) {
			t.Fatalf("got %v, want the loader's error", err)
		}
	}
	if loads.Load() != 2 {
		t.Fatalf("%d loads, want 2 (nothing stored, no back-off)", loads.Load())
	}
	nm := g.names(key)
	if n, err := rdb.Exists(ctxT(t), nm.keys[0], nm.keys[1]).Result(); err != nil || n != 0 {
		t.Fatalf("entry or lease left in Redis (%d, %v)", n, err)
	}
}
