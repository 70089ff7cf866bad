package garbage

import (
	"context"
	"errors"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

func newGroup(t *testing.T) *guard.Group {
	_, rdb := redistest.Mini(t)
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func store(t *testing.T, g *guard.Group, key string, v []byte) {
	if err := g.Invalidate(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return v, nil }); err != nil {
		t.Fatal(err)
	}
}

// TestDropOutlivesItsCaller: the drop runs without the cancellation of
// the caller that started it: that caller leaving does not leave the
// garbage in place, and the callers that joined it without their refill.
// (It ran on that caller's context before, in httpcache and guardgrpc.)
func TestDropOutlivesItsCaller(t *testing.T) {
	g := newGroup(t)
	store(t, g, "k", []byte("garbage"))
	var d Drops
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the first caller left
	if !d.Drop(ctx, g, "k", []byte("garbage")) {
		t.Fatal("the drop gave up with its first caller's context")
	}
	if res, err := g.Peek(context.Background(), "k"); !errors.Is(err, guard.ErrNotCached) {
		t.Errorf("after the drop: %q %v, want ErrNotCached", res.Value, err)
	}
}

// TestDropKeepsARefill: a caller that read the garbage before another
// dropped it, and a load refilled the key, asks again without dropping
// the refill.
func TestDropKeepsARefill(t *testing.T) {
	g := newGroup(t)
	store(t, g, "k", []byte("good"))
	var d Drops
	if !d.Drop(context.Background(), g, "k", []byte("garbage")) {
		t.Fatal("the caller was not told to ask again")
	}
	if res, err := g.Peek(context.Background(), "k"); err != nil || string(res.Value) != "good" {
		t.Errorf("after the drop: %q %v, want the refill kept", res.Value, err)
	}
}
