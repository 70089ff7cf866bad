package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// BenchmarkRevalidate100KB: what conditional revalidation saves on a 100 KB
// route. The origin answers Cache-Control: no-cache with an ETag, so every
// request is a refresh of the stored response (RFC 9111 §5.2.2.4). With
// "304" the origin answers the middleware's If-None-Match with 304: the
// body crosses neither the origin link nor the Redis link again (the fill
// script keeps it in Redis). With "200" it ignores validators, as an origin
// without ETag support does, and every refresh moves the whole body twice.
// Reported per request: bytes sent to Redis, bytes of body the origin sent.
//
//	cd bench && go test -run '^$' -bench Revalidate100KB -benchmem .
func BenchmarkRevalidate100KB(b *testing.B) {
	body := []byte(strings.Repeat("r", 100<<10))
	for _, c := range []struct {
		name   string
		honour bool
	}{{"304", true}, {"200", false}} {
		b.Run(c.name, func(b *testing.B) {
			var originBytes atomic.Int64
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "no-cache")
				w.Header().Set("ETag", `"big"`)
				if c.honour && r.Header.Get("If-None-Match") == `"big"` {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				n, _ := w.Write(body)
				originBytes.Add(int64(n))
			}))
			b.Cleanup(origin.Close)
			u, _ := url.Parse(origin.URL)
			rdb := redis.NewClient(&redis.Options{Addr: server(b), ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = rdb.Close() })
			sent := &argBytes{}
			rdb.AddHook(sent)
			g, err := guard.New(rdb, guard.Options{Namespace: uniqueKey("reval") + ":"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = g.Close() })
			h := guardhttp.Middleware(g, guardhttp.Config{UpstreamWindows: true, RequireFreshness: true})(httputil.NewSingleHostReverseProxy(u))
			get := func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/report", nil))
				if w.Code != http.StatusOK || w.Body.Len() != len(body) {
					b.Fatalf("status %d, %d bytes", w.Code, w.Body.Len())
				}
			}
			get() // the first fill
			sent.n.Store(0)
			originBytes.Store(0)
			b.ReportAllocs()
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(sent.n.Load())/float64(b.N), "redis-B/op")
			b.ReportMetric(float64(originBytes.Load())/float64(b.N), "origin-B/op")
		})
	}
}

// argBytes counts the bytes of command arguments a client sends to Redis.
type argBytes struct{ n atomic.Int64 }

func (a *argBytes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (a *argBytes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a.count(cmd)
		return next(ctx, cmd)
	}
}
func (a *argBytes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			a.count(c)
		}
		return next(ctx, cmds)
	}
}

func (a *argBytes) count(cmd redis.Cmder) {
	for _, v := range cmd.Args() {
		switch v := v.(type) {
		case string:
			a.n.Add(int64(len(v)))
		case []byte:
			a.n.Add(int64(len(v)))
		}
	}
}
