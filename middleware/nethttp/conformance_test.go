package guardhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// adapter puts guardhttp in front of an origin for the shared tables.
var adapter = conformance.Adapter{
	Name: "nethttp",
	New: func(g *guard.Group, cfg conformance.Config, origin http.Handler) http.Handler {
		return guardhttp.Middleware(g, cfg)(origin)
	},
}

// TestRules runs the rules every HTTP adapter shares (package
// middleware/internal/conformance) on standalone Redis and on a cluster.
func TestRules(t *testing.T) { conformance.Rules(t, adapter) }

// TestRFC9111 runs the HTTP-cache table (package
// middleware/internal/conformance) on standalone Redis and on a cluster.
func TestRFC9111(t *testing.T) { conformance.RFC9111(t, adapter) }

// TestKeyFunc holds the rows of net/http's own Config.KeyFunc, which takes
// an *http.Request: each row sends two requests and counts handler calls.
func TestKeyFunc(t *testing.T) {
	rows := []struct {
		name       string
		keyFunc    func(*http.Request) string
		req1, req2 *http.Request
		wantCalls  int64
		wantCS     string // Cache-Status of both responses, when set
	}{
		{name: "custom func shares", keyFunc: func(r *http.Request) string { return r.URL.Path }, req1: get("/a?x=1"), req2: get("/a?x=2"), wantCalls: 1},
		{name: "custom func empty bypasses", keyFunc: func(*http.Request) string { return "" }, req1: get("/a"), req2: get("/a"), wantCalls: 2, wantCS: "stampede; fwd=bypass"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			g := miniGroup(t, guard.Options{FreshFor: time.Hour})
			o := &origin{}
			h := guardhttp.Middleware(g, guardhttp.Config{KeyFunc: row.keyFunc})(o)
			first, second := serve(h, row.req1), serve(h, row.req2)
			if got := o.calls.Load(); got != row.wantCalls {
				t.Errorf("handler calls %d, want %d", got, row.wantCalls)
			}
			if row.wantCS == "" {
				return
			}
			for i, h := range []http.Header{first.Header(), second.Header()} {
				if got := h.Get("Cache-Status"); got != row.wantCS {
					t.Errorf("response %d: Cache-Status %q, want %q", i+1, got, row.wantCS)
				}
			}
		})
	}
}

// TestTransparency runs the transparency property (package
// middleware/internal/conformance) on generated cases.
func TestTransparency(t *testing.T) { conformance.Transparency(t, adapter) }

// FuzzTransparency runs the transparency property on cases chosen by fuzz
// input; its seeds are the cases of the outside review's findings.
func FuzzTransparency(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { conformance.TransparencyCase(t, adapter, data) })
}

// TestMisuse holds the adapter to the one rule for programmer errors
// (package middleware/internal/conformance).
func TestMisuse(t *testing.T) { conformance.Misuse(t, adapter, "guardhttp") }
