package guard

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTier: with LocalEntries set, a repeated hit costs no round trip;
// Invalidate drops the local copy.
func TestLocalTier(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	hook := &cmdCounter{}
	rdb.AddHook(hook)
	g := newGroup(t, rdb, Options{LocalEntries: 16, LocalTTL: time.Minute})
	waitTier(t, g)
	key := redistest.Key(t)
	if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	// A read keeps the value (one sent before the report of the Group's
	// own fill arrived keeps nothing: it might be older).
	redistest.Eventually(t, 10*time.Second, "the value in the tier", func() bool {
		if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || r.Status != Hit {
			t.Fatalf("%v %v", r.Status, err)
		}
		return g.loc.Len() == 1
	})
	// Ten hits in a row send nothing. A round may legitimately read Redis
	// while a barrier of the tier is in flight (a hit then cannot prove its
	// copy current), so the claim is that some round sends nothing at all;
	// a tier that read Redis on every hit never gets there.
	redistest.Eventually(t, 10*time.Second, "ten hits that send no command", func() bool {
		before := hook.n.Load()
		for range 10 {
			if r, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil || r.Status != Hit || string(r.Value) != "v" {
				t.Fatalf("%v %q %v", r.Status, r.Value, err)
			}
		}
		return hook.n.Load() == before
	})
	if err := g.Invalidate(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("w"), nil }); err != nil || string(r.Value) != "w" {
		t.Fatalf("after Invalidate: %q %v", r.Value, err)
	}
}

// waitTier waits until g's in-process tier serves: its report connections
// are confirmed.
func waitTier(t *testing.T, g *Group) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "the in-process tier on", func() bool {
		return g.loc != nil && g.loc.Live.Load()
	})
}

// servesFromTier reports whether g's tier answers every key of keys. Only
// that says a copy is held: one kept from a read can still be dropped by
// the report of the fill that wrote it, which Redis may flush after the
// fill's reply, so a copy the tier holds (loc.Len) may be gone a moment
// later; one it serves has passed the fence, with no report waiting.
func servesFromTier(t *testing.T, g *Group, keys ...string) bool {
	t.Helper()
	for _, k := range keys {
		if _, ok := g.tierHit(ctxT(t), k); !ok {
			return false
		}
	}
	return true
}

// TestTierHitIsDosTierAnswer: tierHit (package internal/tierhit, for the
// HTTP engine) answers as Do does from the tier, counting the hit in
// Hooks.Hit as local, and declines (ok false, nothing counted) wherever
// Do would go further or fail: no copy, a done ctx, a bad key, early
// refresh on (which needs the load), a closed Group.
func TestTierHitIsDosTierAnswer(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var local int
	hooks := Hooks{Hit: func(_ string, _ time.Duration, isLocal bool) {
		if isLocal {
			local++
		}
	}}
	g := newGroup(t, rdb, Options{LocalEntries: 16, LocalTTL: time.Minute, Hooks: hooks})
	waitTier(t, g)
	key := redistest.Key(t)
	if _, ok := g.tierHit(ctxT(t), key); ok {
		t.Fatal("tierHit answered a key never filled")
	}
	if _, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	var res Result
	redistest.Eventually(t, 10*time.Second, "the value in the tier", func() bool {
		if _, err := g.Do(ctxT(t), key, nil2Loader(t)); err != nil {
			t.Fatal(err)
		}
		var ok bool
		res, ok = g.tierHit(ctxT(t), key)
		return ok
	})
	if string(res.Value) != "v" || res.Status != Hit || res.Age < 0 || res.Fresh <= 0 {
		t.Errorf("tierHit = %q %v age %v fresh %v, want v, a fresh Hit", res.Value, res.Status, res.Age, res.Fresh)
	}
	before := local
	if _, ok := g.tierHit(ctxT(t), key); !ok || local != before+1 {
		t.Errorf("a tier hit counted %d local hits, want 1", local-before)
	}
	done, cancel := context.WithCancel(ctxT(t))
	cancel()
	before = local
	for name, call := range map[string]func() bool{
		"done ctx":  func() bool { _, ok := g.tierHit(done, key); return ok },
		"empty key": func() bool { _, ok := g.tierHit(ctxT(t), ""); return ok },
	} {
		if call() {
			t.Errorf("%s: tierHit answered", name)
		}
	}
	early := newGroup(t, rdb, Options{Namespace: g.opts.Namespace, LocalEntries: 16, LocalTTL: time.Minute, EarlyRefreshBeta: 1})
	waitTier(t, early)
	redistest.Eventually(t, 10*time.Second, "the value in the early-refresh Group's tier", func() bool {
		if _, err := early.Do(ctxT(t), key, nil2Loader(t)); err != nil {
			t.Fatal(err)
		}
		return early.loc.Len() == 1
	})
	if _, ok := early.tierHit(ctxT(t), key); ok {
		t.Error("tierHit answered with EarlyRefreshBeta set")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.tierHit(ctxT(t), key); ok {
		t.Error("tierHit answered on a closed Group")
	}
	if local != before {
		t.Errorf("declined calls counted %d hits", local-before)
	}
}
