package guard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestGetManyWaitReportsOneLookup: a GetMany key that misses, waits, and
// is answered by another node's fill reports one lookup (its Miss), not a
// Hit besides (it reported two before).
func TestGetManyWaitReportsOneLookup(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var lookups atomic.Int64
	o := Options{Namespace: redistest.Key(t) + ":", FreshFor: time.Hour}
	a := newGroup(t, rdb, o)
	ob := o
	ob.Hooks = Hooks{Hit: func(string, time.Duration, bool) { lookups.Add(1) },
		Stale: func(string, time.Duration) { lookups.Add(1) }, Miss: func(string) { lookups.Add(1) }}
	b := newGroup(t, otherClient(t, rdb), ob)
	started, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Get(ctxT(t), "k", func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("v"), nil
		})
		aDone <- err
	}()
	<-started
	go func() { time.Sleep(100 * time.Millisecond); close(release) }()
	got, err := b.GetMany(ctxT(t), []string{"k"}, func(context.Context, []string) (map[string][]byte, error) {
		t.Error("B loaded")
		return nil, nil
	})
	if err != nil || string(got["k"]) != "v" {
		t.Fatalf("B: %q %v", got, err)
	}
	<-aDone
	if n := lookups.Load(); n != 1 {
		t.Errorf("one GetMany key reported %d lookups (Hit+Stale+Miss); want 1", n)
	}
}
