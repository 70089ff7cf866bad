package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestCoalescedWhileWaiting: the callers of one node that shared its
// flight waiting for another node's fill were not counted Coalesced
// (only a flight's own Miss was): four nodes of 16 callers on a cold key
// reported 75 coalesced of 300. Every caller of a flight but one is.
func TestCoalescedWhileWaiting(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	o := Options{WaitTimeout: 20 * time.Second, LocalEntries: Disabled}
	a := newGroup(t, rdb, o)
	key := redistest.Key(t)
	inLoad, release := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Do(ctxT(t), key, func(context.Context) ([]byte, error) {
			close(inLoad)
			<-release
			return []byte("a"), nil
		})
		aDone <- err
	}()
	<-inLoad
	var coalesced atomic.Int64
	bo := o
	bo.Hooks.Coalesced = func(string) { coalesced.Add(1) }
	b := newGroup(t, rdb, bo)
	const callers = 8
	var joined sync.WaitGroup
	joined.Add(callers)
	b.testStep = func(_ context.Context, step string) {
		if step == "miss flight" {
			joined.Done()
		}
	}
	var wg sync.WaitGroup
	var shared atomic.Int64
	for range callers {
		wg.Go(func() {
			r, err := b.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("b"), nil })
			if err != nil || string(r.Value) != "a" {
				t.Errorf("B's caller: %q, %v; want A's fill", r.Value, err)
			}
			if r.Status == Shared {
				shared.Add(1)
			}
		})
	}
	joined.Wait() // all in B's flight, waiting for A's fill
	close(release)
	wg.Wait()
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if shared.Load() != callers || coalesced.Load() != callers-1 {
		t.Errorf("B: %d of %d callers Shared, %d Coalesced; want all Shared, %d Coalesced (all but its flight's leader)", shared.Load(), callers, coalesced.Load(), callers-1)
	}
}
