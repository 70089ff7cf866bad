package guard

import (
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
		back  bool // B's tier serves again once the fault is over
	}{
		{"delay 5ms", func(p *redistest.Proxy) { p.Delay(5 * time.Millisecond) }, true},
		{"delay 50ms", func(p *redistest.Proxy) { p.Delay(50 * time.Millisecond) }, false},
		{"delay 300ms", func(p *redistest.Proxy) { p.Delay(300 * time.Millisecond) }, false},
		{"stall 3s", func(p *redistest.Proxy) {
			p.Stall()
			time.Sleep(3 * time.Second) // the fault's length
			p.Resume()
		}, true},
		{"cut", func(p *redistest.Proxy) { p.Cut() }, true},
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
			r := runLagChecker(t, lagRun{a: a, b: b, fault: func() { f.fault(proxy) }, back: f.back})
			assertLag(t, f.name, r, lag, f.back)
		})
	}
}
