package conformance

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// topology names a Redis deployment and returns a new client of it.
type topology struct {
	name   string
	client func(t *testing.T) redis.UniversalClient
}

// topologies are the deployments every adapter is proven on: a standalone
// server (a real one when redis-server is installed, else miniredis) and
// the shared 3-master cluster (skipped without redis-server unless
// STAMPEDE_REQUIRE_REDIS=1).
var topologies = []topology{
	{"standalone", func(t *testing.T) redis.UniversalClient { return redistest.Universal(t) }},
	{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).Client(t) }},
}

// NewGroup returns a Group on rdb, closed when t ends, in a namespace of its
// own unless o names one, with a generous RedisTimeout unless o sets one.
// Every adapter's tests build their Groups with it.
func NewGroup(t testing.TB, rdb redis.UniversalClient, o guard.Options) *guard.Group {
	t.Helper()
	if o.Namespace == "" {
		o.Namespace = redistest.Key(t) + ":"
	}
	if o.RedisTimeout == 0 {
		// The tables are about the adapters, not Redis latency: a loaded
		// machine (-race, packages in parallel) must not turn an answer
		// into a degraded one.
		o.RedisTimeout = 10 * time.Second
	}
	g, err := guard.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// MiniGroup returns NewGroup on a miniredis of its own.
func MiniGroup(t testing.TB, o guard.Options) *guard.Group {
	t.Helper()
	_, rdb := redistest.Mini(t)
	return NewGroup(t, rdb, o)
}

// noLeaks checks, when t ends (after the cleanups registered later), that
// the test left no goroutine behind.
func noLeaks(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		// A shared redis-server started by this test outlives it.
		goleak.IgnoreAnyFunction("github.com/stampede-go/stampede/internal/redistest.(*Server).launch.func1"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
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

// gate is closed once n requests have arrived in front of the middleware:
// the handler waits on it, so every request has been sent on to the guard
// before the handler answers. (The guard has no hook for "joined an
// in-process flight", so a request may still reach it after the flight
// ended; the assertions hold for either interleaving.)
type gate struct {
	n       int64
	arrived atomic.Int64
	open    chan struct{}
}

func newGate(n int) *gate { return &gate{n: int64(n), open: make(chan struct{})} }

// in counts the requests reaching h.
func (g *gate) in(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.arrived.Add(1) == g.n {
			close(g.open)
		}
		h.ServeHTTP(w, r)
	})
}

func (g *gate) wait(t testing.TB) {
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
		t.Errorf("only %d of %d requests arrived", g.arrived.Load(), g.n)
	}
}

func get(target string) *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }

// with returns r after f changed it.
func with(r *http.Request, f func(*http.Request)) *http.Request { f(r); return r }

func header(k, v string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Add(k, v) }
}

// respond returns an origin answer: status, header pairs and body.
func respond(status int, body string, kv ...string) func(http.ResponseWriter, *http.Request, int64) {
	return func(w http.ResponseWriter, r *http.Request, n int64) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Add(kv[i], kv[i+1])
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// goexited serves r on h, writing to rec, on a goroutine of its own, and
// reports whether h ended it with runtime.Goexit.
func goexited(h http.Handler, r *http.Request, rec http.ResponseWriter) bool {
	var ended bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		returned := false
		defer func() { ended = !returned && recover() == nil }()
		h.ServeHTTP(rec, r)
		returned = true
	}()
	<-done
	return ended
}

// recovered serves r on h and returns what h panicked with, or nil.
func recovered(h http.Handler, r *http.Request) (p any) {
	defer func() { p = recover() }()
	serve(h, r)
	return nil
}
