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
