package guardhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
)

// newGroup and miniGroup are the shared tables' helpers.
func newGroup(t testing.TB, rdb redis.UniversalClient, o guard.Options) *guard.Group {
	return conformance.NewGroup(t, rdb, o)
}

func miniGroup(t testing.TB, o guard.Options) *guard.Group { return conformance.MiniGroup(t, o) }

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
