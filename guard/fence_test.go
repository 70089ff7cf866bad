package guard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLateWriterRejected: a node whose refresh started before an Invalidate
// (or before a newer fill) never overwrites the newer value.
func TestLateWriterRejected(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		var rejected counter
		late := newGroup(t, rdb, Options{Hooks: Hooks{FillRejected: func(string) { rejected.add() }}})
		fresh := newGroup(t, rdb, Options{})
		key := redistest.Key(t)
		slow := newOrigin(true)
		slow.value = func(int64) ([]byte, error) { return []byte("old"), nil }
		done := make(chan error, 1)
		go func() {
			_, err := late.Do(ctxT(t), key, slow.load)
			done <- err
		}()
		redistest.Eventually(t, 10*time.Second, "the late writer loading", func() bool { return slow.calls.Load() == 1 })
		// The data changed: invalidate, and another node loads the new value.
		if err := fresh.Invalidate(ctxT(t), key); err != nil {
			t.Fatal(err)
		}
		r, err := fresh.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("new"), nil })
		if err != nil || string(r.Value) != "new" {
			t.Fatalf("got %q, %v", r.Value, err)
		}
		close(slow.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if rejected.n.Load() != 1 {
			t.Fatalf("%d fills rejected, want the late writer's", rejected.n.Load())
		}
		r, err = fresh.Do(ctxT(t), key, slow.load)
		if err != nil || string(r.Value) != "new" || r.Status != Hit {
			t.Fatalf("after the late fill: %v %q %v, want hit \"new\"", r.Status, r.Value, err)
		}
	})
}
