package guardhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// newGroup returns a Group on rdb, closed when t ends.
func newGroup(t testing.TB, rdb redis.UniversalClient, o guard.Options) *guard.Group {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = redistest.Key(t) + ":"
	}
	if o.RedisTimeout == 0 {
		// These tests are about the middleware, not Redis latency: a
		// loaded machine (-race, packages in parallel) must not turn an
		// answer into a degraded one.
		o.RedisTimeout = 10 * time.Second
	}
	g, err := guard.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// miniGroup returns a Group on a miniredis of its own.
func miniGroup(t testing.TB, o guard.Options) *guard.Group {
	t.Helper()
	_, rdb := redistest.Mini(t)
	return newGroup(t, rdb, o)
}

// origin counts its calls; serve answers them (default: a 200 text body
// naming the call and the request).
type origin struct {
	calls atomic.Int64
	serve func(w http.ResponseWriter, r *http.Request, n int64)
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.calls.Add(1)
	if o.serve != nil {
		o.serve(w, r, n)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "call %d %s %s", n, r.Method, r.URL.RequestURI())
}

func get(target string) *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}
