package conformance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// skipper: Config.Skipper is one concept in every adapter. Two servers on
// one Redis skip /metrics and requests carrying X-Debug: each server
// answers its own /metrics, every time, without Cache-Status, and an
// unsafe request it skips invalidates nothing.
func skipper(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	cfg := Config{Skipper: func(r *http.Request) bool {
		return r.URL.Path == "/metrics" || r.Header.Get("X-Debug") != ""
	}}
	ns := redistest.Key(t) + ":"
	var servers []http.Handler
	var origins []*origin
	for _, name := range []string{"a", "b"} {
		o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
			fmt.Fprintf(w, "%s %s %d", name, r.URL.Path, n)
		}}
		g := NewGroup(t, top.client(t), guard.Options{Namespace: ns})
		servers, origins = append(servers, a.New(g, cfg, o)), append(origins, o)
	}
	A, B := servers[0], servers[1]
	for i, want := range []string{"a /metrics 1", "b /metrics 1", "b /metrics 2"} {
		h := B
		if i == 0 {
			h = A
		}
		rec := serve(h, get("/metrics"))
		if got, cs := rec.Body.String(), rec.Header().Get("Cache-Status"); got != want || cs != "" {
			t.Errorf("GET /metrics %d: %q with Cache-Status %q, want %q and none", i+1, got, cs, want)
		}
	}
	serve(A, get("/page"))
	put := with(httptest.NewRequest(http.MethodPut, "/page", nil), header("X-Debug", "1"))
	serve(B, put)
	if got := serve(A, get("/page")).Header().Get("Cache-Status"); got != "stampede; hit" {
		t.Errorf("GET /page after a skipped PUT: Cache-Status %q, want a hit", got)
	}
	if got := origins[0].calls.Load(); got != 2 {
		t.Errorf("server A's handler calls %d, want 2 (/metrics once, /page once)", got)
	}
}
