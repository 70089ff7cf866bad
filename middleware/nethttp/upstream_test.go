package guardhttp_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// TestUpstreamDirectives: with Config.UpstreamWindows the handler's
// max-age, s-maxage, stale-while-revalidate and stale-if-error (RFC 5861)
// set the windows of its response; without it the guard's windows apply.
// The guard's own windows are an hour fresh and a second stale (a
// Disabled StaleFor would forbid any stale window, the upstream's too), so each row
// shows the directive at work. Each row stores the response at t0, then
// asks a new node at t0+at whether it is served from the entry (a new
// Group: the guard estimates the Redis clock from its own, so only a node
// that has not read the key sees miniredis's clock jump).
func TestUpstreamDirectives(t *testing.T) {
	const ran = `stampede; fwd=miss; detail="server error"`
	rows := []struct {
		name     string
		upstream bool
		cc, age  string // the handler's Cache-Control and Age
		at       time.Duration
		want     string // Cache-Status at t0+at; ran is a new handler run (failing: 503)
	}{
		{name: "not configured: max-age ignored", cc: "max-age=10", at: 11 * time.Second, want: "stampede; hit"},
		{name: "max-age fresh", upstream: true, cc: "max-age=10", at: 9 * time.Second, want: "stampede; hit"},
		{name: "max-age expired", upstream: true, cc: "max-age=10", at: 11 * time.Second, want: ran},
		{name: "s-maxage over max-age", upstream: true, cc: "max-age=1000, s-maxage=10", at: 11 * time.Second, want: ran},
		{name: "s-maxage longer than max-age", upstream: true, cc: "s-maxage=1000, max-age=10", at: 11 * time.Second, want: "stampede; hit"},
		{name: "upstream Age counts", upstream: true, cc: "max-age=60", age: "55", at: 10 * time.Second, want: ran},
		{name: "stale-while-revalidate serves stale", upstream: true, cc: "max-age=10, stale-while-revalidate=100", at: 50 * time.Second, want: "stampede; fwd=stale"},
		{name: "stale-while-revalidate ends", upstream: true, cc: "max-age=10, stale-while-revalidate=100", at: 111 * time.Second, want: ran},
		{name: "stale-if-error serves stale when the origin fails", upstream: true, cc: "max-age=10, stale-if-error=100", at: 50 * time.Second, want: "stampede; fwd=stale"},
		{name: "stale-if-error ends", upstream: true, cc: "max-age=10, stale-if-error=100", at: 111 * time.Second, want: ran},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			mr, rdb := redistest.Mini(t)
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			mr.SetTime(now)
			ns := redistest.Key(t) + ":"
			var failing atomic.Bool // the origin is down after t0
			o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Cache-Control", row.cc)
				if row.age != "" {
					w.Header().Set("Age", row.age)
				}
				if failing.Load() {
					// Only a stale window keeps the response served.
					w.Header().Del("Cache-Control")
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				fmt.Fprintf(w, "v%d", n)
			}}
			node := func() (*guard.Group, http.Handler) {
				g := newGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Hour, StaleFor: time.Second, Jitter: guard.Disabled})
				return g, guardhttp.Middleware(g, guardhttp.Config{UpstreamWindows: row.upstream})(o)
			}

			_, h := node()
			// The first response is stored, under its own windows
			// (guard.SetWindows): nothing is learnt per key.
			const stored = "v1"
			if rec := serve(h, get("/a")); rec.Header().Get("Cache-Status") != "stampede; fwd=miss; stored" || rec.Body.String() != stored {
				t.Fatalf("first load: %q %v; want it stored", rec.Body, rec.Header())
			}

			failing.Store(true)
			mr.SetTime(now.Add(row.at))
			g2, h2 := node()
			rec := serve(h2, get("/a"))
			if err := g2.Close(); err != nil { // waits for any refresh
				t.Fatal(err)
			}
			got := rec.Header().Get("Cache-Status")
			if got != row.want {
				t.Errorf("at +%v: Cache-Status %q, want %q (%d %q)", row.at, got, row.want, rec.Code, rec.Body)
			}
			if fromEntry := got != ran; fromEntry && (rec.Code != 200 || rec.Body.String() != stored) {
				t.Errorf("at +%v: served %d %q from the entry, want 200 %q", row.at, rec.Code, rec.Body, stored)
			}
		})
	}
}
