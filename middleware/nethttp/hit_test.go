package guardhttp_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// TestHitAllocations: a hit the in-process tier answers costs the
// middleware no allocation: its key, the stored response's decoding and
// its Age and Cache-Status fields are made once per URL, entry and second,
// and the tier is asked without the call record and load a Do needs. A
// variant of a URL that varies allocates its record's decoding and its
// variant key (7 allocations, 11 through Do; logged, not checked). Every
// hit counts once in Hooks.Hit per guard lookup (a variant takes two: its
// URL's record, then the variant), as when each went through Do. Runs in
// which a hit read Redis (the tier's fence was not quiet) are not counted
// for allocations: those are go-redis's.
func TestHitAllocations(t *testing.T) {
	for _, tc := range []struct {
		name, vary string
		lookups    int64 // guard lookups per hit
		allocs     bool  // allocations are checked (none)
	}{{"url", "", 1, true}, {"variant", "Accept-Language", 2, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var remote, hits atomic.Int64
			g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{Hooks: guard.Hooks{
				Hit: func(_ string, _ time.Duration, local bool) {
					hits.Add(1)
					if !local {
						remote.Add(1)
					}
				},
			}})
			body := []byte(strings.Repeat("x", 1024))
			var calls atomic.Int64
			h := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "text/plain")
				if tc.vary != "" {
					w.Header().Set("Vary", tc.vary)
				}
				_, _ = w.Write(body)
			}))
			req := get("/hit?a=1&b=2")
			req.Header.Set("Accept-Language", "fr")
			w := &discard{h: http.Header{}}
			hit := func() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
			hit() // fill
			counted := false
			for attempt := 0; attempt < 50 && !counted; attempt++ {
				before := remote.Load()
				allocs := testing.AllocsPerRun(100, hit)
				if remote.Load() != before {
					continue
				}
				counted = true
				if !tc.allocs {
					t.Logf("%v allocations per hit", allocs)
				} else if allocs > 0 {
					t.Errorf("%v allocations per hit, want none", allocs)
				}
			}
			if !counted {
				t.Fatal("no run of 100 hits was answered by the in-process tier alone")
			}
			if got := w.h.Get("Cache-Status"); got != "stampede; hit" {
				t.Fatalf("Cache-Status %q: not a hit", got)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want once (the fill)", n)
			}
			before := hits.Load()
			const n = 50
			for range n {
				hit()
			}
			if got := hits.Load() - before; got != n*tc.lookups {
				t.Errorf("%d hits counted %d times in Hooks.Hit, want %d", n, got, n*tc.lookups)
			}
		})
	}
}
