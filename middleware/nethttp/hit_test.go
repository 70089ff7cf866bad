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
// middleware at most two allocations (the request's call, which a load
// may outlive, and its load func): its key, the stored response's decoding
// and its Age and Cache-Status fields are made once per URL, entry and
// second, not per request. Runs in which a hit read Redis (the tier's
// fence was not quiet) are not counted: their allocations are go-redis's.
func TestHitAllocations(t *testing.T) {
	var remote atomic.Int64
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{Hooks: guard.Hooks{
		Hit: func(_ string, _ time.Duration, local bool) {
			if !local {
				remote.Add(1)
			}
		},
	}})
	body := []byte(strings.Repeat("x", 1024))
	h := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	}))
	req := get("/hit?a=1&b=2")
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
		if allocs > 2 {
			t.Errorf("%v allocations per hit, want at most 2", allocs)
		}
	}
	if !counted {
		t.Fatal("no run of 100 hits was answered by the in-process tier alone")
	}
	if got := w.h.Get("Cache-Status"); got != "stampede; hit" {
		t.Fatalf("Cache-Status %q: not a hit", got)
	}
}
