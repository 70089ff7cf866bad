package guard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestFillIntoFrozenRedisKeepsValue: a load that won the lease, whose
// fill then failed because Redis stopped answering, threw its value away:
// the node's next call, in the same outage and well within FreshFor, ran
// the loader again (one more origin load per key in flight when Redis
// went away). The value is kept in the reserve now, as a load made while
// Redis is known down keeps its own: the next calls of the outage are
// served it, degraded, and the loader runs once.
func TestFillIntoFrozenRedisKeepsValue(t *testing.T) {
	for _, local := range []int{100, Disabled} {
		t.Run(fmt.Sprint(local), func(t *testing.T) {
			srv := redistest.Start(t)
			g := newGroup(t, srv.Client(t), Options{LocalEntries: local, RedisTimeout: 100 * time.Millisecond, FreshFor: time.Minute})
			var calls atomic.Int64
			load := func(context.Context) ([]byte, error) {
				n := calls.Add(1)
				if n == 1 {
					srv.Freeze(t) // Redis stops answering before the fill
					t.Cleanup(func() { srv.Thaw(t) })
				}
				return fmt.Appendf(nil, "v%d", n), nil
			}
			res, err := g.Do(ctxT(t), "k", load)
			if err != nil || string(res.Value) != "v1" {
				t.Fatalf("first call: %q, %v", res.Value, err)
			}
			for i := range 5 {
				res, err := g.Do(ctxT(t), "k", load)
				if err != nil || string(res.Value) != "v1" || res.Status != Degraded {
					t.Errorf("call %d in the outage: %q %v, %v; want v1, degraded", i+2, res.Value, res.Status, err)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the loader ran %d times on one node in one outage; want 1", n)
			}
		})
	}
}

// TestBatchFillIntoFrozenRedisKeepsValues is
// TestFillIntoFrozenRedisKeepsValue for GetMany: a batch load whose fill
// pipeline Redis did not take threw its values away, and the node's next
// GetMany in the same outage loaded the keys again.
func TestBatchFillIntoFrozenRedisKeepsValues(t *testing.T) {
	srv := redistest.Start(t)
	g := newGroup(t, srv.Client(t), Options{LocalEntries: Disabled, RedisTimeout: 100 * time.Millisecond, FreshFor: time.Minute})
	keys := []string{"a", "b", "c"}
	var calls atomic.Int64
	load := func(_ context.Context, ks []string) (map[string][]byte, error) {
		n := calls.Add(1)
		if n == 1 {
			srv.Freeze(t) // Redis stops answering before the fill
			t.Cleanup(func() { srv.Thaw(t) })
		}
		out := map[string][]byte{}
		for _, k := range ks {
			out[k] = fmt.Appendf(nil, "%s%d", k, n)
		}
		return out, nil
	}
	for i := range 4 {
		got, err := g.GetMany(ctxT(t), keys, load)
		if err != nil {
			t.Fatalf("GetMany %d: %v", i+1, err)
		}
		for _, k := range keys {
			if string(got[k]) != k+"1" {
				t.Errorf("GetMany %d: %s = %q, want %q (the first load's)", i+1, k, got[k], k+"1")
			}
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the batch loader ran %d times on one node in one outage; want 1", n)
	}
}
