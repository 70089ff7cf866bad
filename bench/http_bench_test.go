package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// BenchmarkHTTPExpiredRoute: 1,000 concurrent requests for one expired
// route (its entry is gone, as after its stale window), spread over 3
// servers that share one redis-server, each server with its own Redis
// client. The handler takes httpOriginLatency. One iteration is one such
// burst on a new route. Reported:
//
//	handler-calls/op  handler calls per burst (guard's target: 1; per-node
//	                  singleflight: up to one per server)
//	p50-ms, p99-ms    request latency
//
//	cd bench && go test -run '^$' -bench HTTPExpiredRoute -benchtime 5x .
func BenchmarkHTTPExpiredRoute(b *testing.B) {
	for _, im := range []struct {
		name string
		mw   func(b *testing.B, rdb *redis.Client, ns string) func(http.Handler) http.Handler
	}{
		{"guard", func(b *testing.B, rdb *redis.Client, ns string) func(http.Handler) http.Handler {
			g, err := guard.New(rdb, guard.Options{Namespace: ns, StaleFor: guard.Disabled, WaitTimeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = g.Close() })
			return guardhttp.Middleware(g, guardhttp.Config{})
		}},
		{"singleflight", func(b *testing.B, rdb *redis.Client, ns string) func(http.Handler) http.Handler {
			return sfMiddleware(rdb, ns, time.Minute)
		}},
	} {
		b.Run(im.name, func(b *testing.B) { expiredRoute(b, im.mw) })
	}
}

const (
	httpServers       = 3
	httpRequests      = 1000
	httpOriginLatency = 50 * time.Millisecond
)

func expiredRoute(b *testing.B, mw func(*testing.B, *redis.Client, string) func(http.Handler) http.Handler) {
	addr := server(b)
	ns := uniqueKey("http") + ":"
	var calls atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(httpOriginLatency) // the origin's work
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(bytes.Repeat([]byte("x"), 1024))
	})
	var urls []string
	for range httpServers {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
		b.Cleanup(func() { _ = rdb.Close() })
		srv := httptest.NewServer(mw(b, rdb, ns)(handler))
		b.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: httpRequests}}
	b.Cleanup(client.CloseIdleConnections)

	burst := func(route string) ([]time.Duration, error) {
		start := make(chan struct{})
		lat := make([]time.Duration, httpRequests)
		errs := make(chan error, httpRequests)
		var wg sync.WaitGroup
		for i := range httpRequests {
			wg.Go(func() {
				<-start
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodGet, urls[i%httpServers]+route, nil)
				req.Host = "shop.example" // one site behind three servers
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
				if err != nil || n != 1024 || resp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d, %d bytes, %v", resp.StatusCode, n, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		return lat, <-errs
	}
	// Dial the connections once, on a route not measured.
	if _, err := burst("/warm"); err != nil {
		b.Fatal(err)
	}
	calls.Store(0)
	var all []time.Duration
	i := 0
	for b.Loop() {
		i++
		lat, err := burst(fmt.Sprintf("/route?n=%d", i))
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, lat...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(calls.Load())/float64(i), "handler-calls/op")
	b.ReportMetric(millis(percentile(all, 0.50)), "p50-ms")
	b.ReportMetric(millis(percentile(all, 0.99)), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// sfMiddleware is the usual per-node answer: GET the response from Redis;
// on a miss, the requests of this node share one handler call through
// golang.org/x/sync/singleflight, whose body is SET for ttl. Nodes do not
// coordinate. (Trivial on purpose: 200 bodies only, no headers kept.)
func sfMiddleware(rdb *redis.Client, ns string, ttl time.Duration) func(http.Handler) http.Handler {
	var sf singleflight.Group
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := ns + r.Host + r.URL.RequestURI()
			ctx := r.Context()
			body, err := rdb.Get(ctx, key).Bytes()
			if err != nil {
				v, _, _ := sf.Do(key, func() (any, error) {
					rec := httptest.NewRecorder()
					next.ServeHTTP(rec, r.WithContext(context.WithoutCancel(ctx)))
					b := rec.Body.Bytes()
					_ = rdb.Set(context.WithoutCancel(ctx), key, b, ttl).Err()
					return b, nil
				})
				body = v.([]byte)
			}
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		})
	}
}

// TestHTTPMiddlewaresAgree: both middlewares of BenchmarkHTTPExpiredRoute
// serve the handler's body, and the guard's burst costs one handler call.
func TestHTTPMiddlewaresAgree(t *testing.T) {
	addr := server(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	g, err := guard.New(rdb, guard.Options{Namespace: uniqueKey("httpt") + ":"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	var calls atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); fmt.Fprint(w, "body") })
	for name, mw := range map[string]func(http.Handler) http.Handler{
		"guard":        guardhttp.Middleware(g, guardhttp.Config{}),
		"singleflight": sfMiddleware(rdb, uniqueKey("httpsf")+":", time.Minute),
	} {
		calls.Store(0)
		for range 3 {
			rec := httptest.NewRecorder()
			mw(h).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
			if rec.Body.String() != "body" {
				t.Errorf("%s: body %q", name, rec.Body)
			}
		}
		if calls.Load() != 1 {
			t.Errorf("%s: %d handler calls, want 1", name, calls.Load())
		}
	}
}
