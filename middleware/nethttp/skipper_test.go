package guardhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// instance is one node of a fleet: a mux whose /metrics and /readyz answer
// for the node itself, and a /page shared by the fleet.
func instance(name string, pageCalls *atomic.Int64) *http.ServeMux {
	var metrics atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "instance %s, scrape %d", name, metrics.Add(1))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ready %s", name)
	})
	mux.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "page %d", pageCalls.Add(1))
	})
	mux.HandleFunc("PUT /page", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// TestSkipper: two instances share one Redis, each wrapped whole, as the
// README's one-liner does. Without a Skipper, instance B answers a scrape of
// its /metrics with A's counters (and /readyz with A's answer). With one
// that names them, each instance answers for itself, with no Cache-Status,
// and an unsafe request it skips invalidates nothing.
func TestSkipper(t *testing.T) {
	skip := func(r *http.Request) bool {
		return r.URL.Path == "/metrics" || r.URL.Path == "/readyz" || r.Header.Get("X-Debug") != ""
	}
	rows := []struct {
		name      string
		skipper   func(*http.Request) bool
		metricsB  string // B's answer to a scrape after A's
		readyB    string
		statusB   string // Cache-Status of B's scrape
		afterPut  string // Cache-Status of /page after a PUT with X-Debug
		pageCalls int64
	}{
		{
			name: "no Skipper: B serves A's metrics", metricsB: "instance a, scrape 1", readyB: "ready a",
			statusB: "stampede; hit", afterPut: "stampede; fwd=miss; stored", pageCalls: 2,
		},
		{
			name: "Skipper: each instance answers for itself", skipper: skip, metricsB: "instance b, scrape 1", readyB: "ready b",
			statusB: "", afterPut: "stampede; hit", pageCalls: 1,
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			rdb := redistest.Universal(t)
			ns := redistest.Key(t) + ":"
			var pageCalls atomic.Int64
			var fleet []http.Handler
			for _, name := range []string{"a", "b"} {
				g := newGroup(t, rdb, guard.Options{Namespace: ns})
				fleet = append(fleet, guardhttp.Middleware(g, guardhttp.Config{Skipper: row.skipper})(instance(name, &pageCalls)))
			}
			a, b := fleet[0], fleet[1]

			serve(a, get("/metrics"))
			rec := serve(b, get("/metrics"))
			if got := rec.Body.String(); got != row.metricsB {
				t.Errorf("B's /metrics after A's: %q, want %q", got, row.metricsB)
			}
			if got := rec.Header().Get("Cache-Status"); got != row.statusB {
				t.Errorf("B's /metrics: Cache-Status %q, want %q", got, row.statusB)
			}
			serve(a, get("/readyz"))
			if got := serve(b, get("/readyz")).Body.String(); got != row.readyB {
				t.Errorf("B's /readyz after A's: %q, want %q", got, row.readyB)
			}

			serve(a, get("/page"))
			put := httptest.NewRequest(http.MethodPut, "/page", nil)
			put.Header.Set("X-Debug", "1")
			if got := serve(b, put).Code; got != http.StatusNoContent {
				t.Fatalf("PUT /page: %d, want 204", got)
			}
			if got := serve(a, get("/page")).Header().Get("Cache-Status"); got != row.afterPut {
				t.Errorf("/page after a PUT with X-Debug: Cache-Status %q, want %q", got, row.afterPut)
			}
			if got := pageCalls.Load(); got != row.pageCalls {
				t.Errorf("/page handler calls %d, want %d", got, row.pageCalls)
			}
		})
	}
}
