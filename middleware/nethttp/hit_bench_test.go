package guardhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// discard is a ResponseWriter that keeps nothing, so the figures are the
// middleware's and the handler's, not a recorder's.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkHit: a GET served from a fresh entry (real redis-server, the
// in-process tier on) against the bare handler, for 1 KB and 100 KB
// bodies. cpu-ns/op is the process's CPU time (user and system, every
// goroutine) per request: on a shared machine it moves less than ns/op,
// which counts the time the process waited for a core too.
//
//	go test -run '^$' -bench Hit -benchmem ./middleware/nethttp
func BenchmarkHit(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"100KB", 100 << 10}} {
		body := []byte(strings.Repeat("x", size.n))
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		})
		run := func(b *testing.B, h http.Handler) {
			req := httptest.NewRequest(http.MethodGet, "/bench?a=1&b=2", nil)
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, req) // fill
			b.SetBytes(int64(size.n))
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		}
		b.Run(size.name+"/bare", func(b *testing.B) { run(b, handler) })
		b.Run(size.name+"/guard", func(b *testing.B) {
			rdb := redistest.Shared(b).Client(b)
			g, err := guard.New(rdb, guard.Options{Namespace: redistest.Key(b) + ":"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = g.Close() })
			h := guardhttp.Middleware(g, guardhttp.Config{MaxBodyBytes: 1 << 20})(handler)
			run(b, h)
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/bench?a=1&b=2", nil))
			if got := w.h.Get("Cache-Status"); got != "stampede; hit" {
				b.Fatalf("Cache-Status %q: not the hit path", got)
			}
		})
	}
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
