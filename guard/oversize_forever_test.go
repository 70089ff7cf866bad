package guard

import (
	"bytes"
	"context"
	"math"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestOversizeForeverFreshFor: a value over MaxValueBytes with FreshFor
// "forever" (math.MaxInt64) is loaded once: its marker's windows add
// saturating. They wrapped negative before, no marker was stored, and
// every call loaded (5 for 5).
func TestOversizeForeverFreshFor(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: math.MaxInt64, Jitter: Disabled, MaxValueBytes: 16}
	g := newGroup(t, rdb, o)
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) { loads.Add(1); return bytes.Repeat([]byte("x"), 64), nil }
	for range 5 {
		if _, err := g.Get(ctxT(t), "k", load); err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads for 5 calls of an oversize value with FreshFor forever; want 1", n)
	}
}
