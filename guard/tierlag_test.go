package guard

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTierLagUnderFaults: node B's report connection goes through a
// proxy that delays, stalls or cuts it (its other connections and node
// A's untouched), while A keeps changing a key and B's readers spin on
// it. Whatever the fault, no read of B that begins more than LocalLag
// after one of A's changes returned gets the value it replaced.
func TestLocalTierLagUnderFaults(t *testing.T) {
	const lag = 100 * time.Millisecond
	for _, f := range []struct {
		name  string
		fault func(p *redistest.Proxy)
	}{
		{"delay 5ms", func(p *redistest.Proxy) { p.Delay(5 * time.Millisecond) }},
		{"delay 50ms", func(p *redistest.Proxy) { p.Delay(50 * time.Millisecond) }},
		{"delay 300ms", func(p *redistest.Proxy) { p.Delay(300 * time.Millisecond) }},
		{"stall 3s", func(p *redistest.Proxy) {
			p.Stall()
			time.AfterFunc(3*time.Second, p.Resume)
		}},
		{"cut", func(p *redistest.Proxy) { p.Cut() }},
	} {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Start(t)
			o := Options{Namespace: redistest.Key(t) + ":", LocalLag: lag, FreshFor: time.Hour, LocalEntries: 100}
			a := newLocalNode(t, srv.Client(t), o)
			proxy := redistest.NewProxy(t, srv.Addr)
			tier.ReportAddr = func(string) string { return proxy.Addr }
			b := newLocalNode(t, srv.Client(t), o)
			tier.ReportAddr = nil
			waitLocal(t, a)
			waitLocal(t, b)
			lagged := runLagChecker(t, a.Group, b.Group, func() { f.fault(proxy) })
			t.Logf("%s: %s", f.name, lagged)
			if lagged.late > 0 {
				t.Errorf("%d reads of B began more than %v after A's change returned and got the replaced value (max %v)",
					lagged.late, lag, lagged.max)
			}
		})
	}
}

// lagReport is what a lag check saw: stale reads of B within the lag
// (allowed), those after it (not), and the longest.
type lagReport struct {
	reads, within, late int
	max                 time.Duration
}

func (r lagReport) String() string {
	return strconv.Itoa(r.reads) + " reads, " + strconv.Itoa(r.within) + " stale within the lag, " +
		strconv.Itoa(r.late) + " after, max " + r.max.String()
}

// runLagChecker changes a key on a for 3s (a version every 10ms: an
// Invalidate, then a load of the next version), fault applied after the
// first 200ms, while two readers on b spin on it; it returns what b's
// reads that began after a change had returned saw.
func runLagChecker(t *testing.T, a, b *Group, fault func()) lagReport {
	t.Helper()
	const key = "lagged"
	var version atomic.Int64
	load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(version.Load(), 10)), nil }
	var mu sync.Mutex
	var changed []time.Time // changed[v]: when version v+1 replaced v on a
	returned := func(v int64) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		if int(v) < len(changed) {
			return changed[v], true
		}
		return time.Time{}, false
	}
	ctx := ctxT(t)
	if _, err := a.Get(ctx, key, load); err != nil {
		t.Fatal(err)
	}
	var r lagReport
	var rmu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				v, err := b.Get(ctx, key, load)
				if err != nil {
					t.Error(err)
					return
				}
				got, _ := strconv.ParseInt(strings.TrimPrefix(string(v), "v"), 10, 64)
				at, ok := returned(got) // when got was replaced, if it was
				rmu.Lock()
				r.reads++
				if ok && start.After(at) {
					late := start.Sub(at)
					r.max = max(r.max, late)
					if late > b.opts.LocalLag {
						r.late++
					} else {
						r.within++
					}
				}
				rmu.Unlock()
			}
		})
	}
	deadline := time.Now().Add(3 * time.Second)
	faulted := false
	for time.Now().Before(deadline) {
		if !faulted && time.Until(deadline) < 2800*time.Millisecond {
			fault()
			faulted = true
		}
		next := version.Add(1)
		if err := a.Invalidate(ctx, key); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		changed = append(changed, time.Now()) // version next-1 replaced
		mu.Unlock()
		_ = next
		if _, err := a.Get(ctx, key, load); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // the writer's pace, not a synchronisation
	}
	close(stop)
	wg.Wait()
	return r
}
