package guardhttp_test

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// discard is a ResponseWriter that keeps nothing, so the figures are the
// middleware's and the handler's, not a recorder's.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkHit: a GET served from a fresh entry (real redis-server, the
// in-process tier on) against the bare handler, for 1 KB and 100 KB
// bodies. cpu-ns/op is the process's CPU time (user and system, every
// goroutine) per request: on a shared machine it moves less than ns/op,
// which counts the time the process waited for a core too.
//
//	go test -run '^$' -bench Hit -benchmem ./middleware/nethttp
func BenchmarkHit(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"100KB", 100 << 10}} {
		body := []byte(strings.Repeat("x", size.n))
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		})
		run := func(b *testing.B, h http.Handler) {
			req := httptest.NewRequest(http.MethodGet, "/bench?a=1&b=2", nil)
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, req) // fill
			b.SetBytes(int64(size.n))
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		}
		b.Run(size.name+"/bare", func(b *testing.B) { run(b, handler) })
		b.Run(size.name+"/guard", func(b *testing.B) {
			rdb := redistest.Shared(b).Client(b)
			g, err := guard.New(rdb, guard.Options{Namespace: redistest.Key(b) + ":"})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = g.Close() })
			h := guardhttp.Middleware(g, guardhttp.Config{MaxBodyBytes: 1 << 20})(handler)
			run(b, h)
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/bench?a=1&b=2", nil))
			if got := w.h.Get("Cache-Status"); got != "stampede; hit" {
				b.Fatalf("Cache-Status %q: not the hit path", got)
			}
		})
	}
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHitLoopback: a hit as net/http serves it, over a loopback
// connection, against a handler that writes the same stored response
// from memory, and against that handler with the two fields a hit adds
// (Age, Cache-Status) written too. Four connections ask at once, each
// with a client that only frames the response (its cost is alike for
// every case), so cpu-ns/op, the process's CPU per request, differs by
// what the server does. BenchmarkHit leaves out what net/http does with
// the header a hit writes; the gap here is the whole of it.
//
//	go test -run '^$' -bench HitLoopback -benchtime 100000x -count 6 ./middleware/nethttp
func BenchmarkHitLoopback(b *testing.B) {
	body := []byte(strings.Repeat("x", 10<<10))
	fields := http.Header{
		"Cache-Control": {"max-age=600, stale-while-revalidate=30"},
		"Etag":          {`"v1"`},
		"Content-Type":  {"text/plain"},
	}
	stored := func(extra http.Header) http.Handler {
		h := fields.Clone()
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
		maps.Copy(h, extra)
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			maps.Copy(w.Header(), h)
			_, _ = w.Write(body)
		})
	}
	run := func(b *testing.B, h http.Handler) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		req := []byte("GET /hot HTTP/1.1\r\nHost: " + loopbackHost + "\r\n\r\n")
		b.SetParallelism(2) // four connections on two cores
		cpu0 := processCPU(b)
		b.RunParallel(func(pb *testing.PB) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Error(err)
				return
			}
			defer func() { _ = c.Close() }()
			br := bufio.NewReaderSize(c, 32<<10)
			for pb.Next() {
				if err := roundTrip(c, br, req, len(body)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("stored", func(b *testing.B) { run(b, stored(nil)) })
	b.Run("stored+fields", func(b *testing.B) {
		run(b, stored(http.Header{"Age": {"0"}, "Cache-Status": {"stampede; hit"}}))
	})
	b.Run("guard", func(b *testing.B) {
		g, err := guard.New(redistest.Shared(b).Client(b), guard.Options{Namespace: redistest.Key(b) + ":"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close() })
		h := guardhttp.Middleware(g, guardhttp.Config{})(stored(nil))
		// The request the connections send, so that each of theirs is
		// the hit checked here.
		h.ServeHTTP(&discard{h: http.Header{}}, httptest.NewRequest(http.MethodGet, "http://"+loopbackHost+"/hot", nil)) // fill
		w := &discard{h: http.Header{}}
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://"+loopbackHost+"/hot", nil))
		if got := w.h.Get("Cache-Status"); got != "stampede; hit" {
			b.Fatalf("Cache-Status %q: not the hit path", got)
		}
		run(b, h)
	})
}

// loopbackHost is the Host of BenchmarkHitLoopback's requests.
const loopbackHost = "bench.example"

// roundTrip sends req on c and reads the response from br: its status
// line and fields up to the empty line, then a body of want bytes, which
// Content-Length must state.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte, want int) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n != want {
		return fmt.Errorf("Content-Length %d, want %d", n, want)
	}
	_, err := br.Discard(n)
	return err
}
