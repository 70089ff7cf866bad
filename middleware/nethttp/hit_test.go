package guardhttp_test

import (
	"context"
	"io"
	"math/bits"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware/httpcache"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// TestHitAllocations: a hit the in-process tier answers costs the
// middleware no allocation: its key, the stored response's decoding and
// its Age and Cache-Status fields are made once per URL, entry and second,
// and the tier is asked without the call record and load a Do needs. A
// variant of a URL that varies allocates its record's decoding and its
// variant key (7 allocations, 11 through Do; logged, not checked). Every
// hit counts once in Hooks.Hit per guard lookup (a variant takes two: its
// URL's record, then the variant), as when each went through Do. Runs in
// which a hit read Redis (the tier's fence was not quiet) are not counted
// for allocations: those are go-redis's.
func TestHitAllocations(t *testing.T) {
	for _, tc := range []struct {
		name, vary string
		lookups    int64 // guard lookups per hit
		allocs     bool  // allocations are checked (none)
	}{{"url", "", 1, true}, {"variant", "Accept-Language", 2, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var remote, hits atomic.Int64
			g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{Hooks: guard.Hooks{
				Hit: func(_ string, _ time.Duration, local bool) {
					hits.Add(1)
					if !local {
						remote.Add(1)
					}
				},
			}})
			body := []byte(strings.Repeat("x", 1024))
			var calls atomic.Int64
			h := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "text/plain")
				if tc.vary != "" {
					w.Header().Set("Vary", tc.vary)
				}
				_, _ = w.Write(body)
			}))
			req := get("/hit?a=1&b=2")
			req.Header.Set("Accept-Language", "fr")
			w := &discard{h: http.Header{}}
			hit := func() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
			hit() // fill
			counted := false
			for attempt := 0; attempt < 50 && !counted; attempt++ {
				before := remote.Load()
				allocs := testing.AllocsPerRun(100, hit)
				if remote.Load() != before {
					continue
				}
				counted = true
				if !tc.allocs {
					t.Logf("%v allocations per hit", allocs)
				} else if allocs > 0 {
					t.Errorf("%v allocations per hit, want none", allocs)
				}
			}
			if !counted {
				t.Fatal("no run of 100 hits was answered by the in-process tier alone")
			}
			if got := w.h.Get("Cache-Status"); got != "stampede; hit" {
				t.Fatalf("Cache-Status %q: not a hit", got)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want once (the fill)", n)
			}
			before := hits.Load()
			const n = 50
			for range n {
				hit()
			}
			if got := hits.Load() - before; got != n*tc.lookups {
				t.Errorf("%d hits counted %d times in Hooks.Hit, want %d", n, got, n*tc.lookups)
			}
		})
	}
}

// TestGarbageInTierCountsEachLookupOnce: a GET that finds garbage under
// its key in the in-process tier is answered by one handler call that
// refills the key, and counts its lookups once each in Hooks.Hit: the
// tier's answer, and the drop's Peek. (The tier's answer went on to Do,
// which counted the same lookup again.)
func TestGarbageInTierCountsEachLookupOnce(t *testing.T) {
	var mu sync.Mutex
	hits, local := map[string]int{}, map[string]int{}
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{Hooks: guard.Hooks{
		Hit: func(key string, _ time.Duration, isLocal bool) {
			mu.Lock()
			defer mu.Unlock()
			hits[key]++
			if isLocal {
				local[key]++
			}
		},
	}})
	eng, err := httpcache.New(g, httpcache.Config[*http.Request]{})
	if err != nil {
		t.Fatal(err)
	}
	key := eng.Key(get("/garbage"))
	garbage := func(context.Context) ([]byte, error) { return []byte("garbage"), nil }
	redistest.Eventually(t, 10*time.Second, "the garbage in the tier", func() bool {
		if _, err := g.Do(t.Context(), key, garbage); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return local[key] > 0
	})
	mu.Lock()
	clear(hits)
	mu.Unlock()
	o := &origin{}
	rec := serve(guardhttp.Middleware(g, guardhttp.Config{})(o), get("/garbage"))
	if rec.Code != http.StatusOK || o.calls.Load() != 1 || rec.Header().Get("Cache-Status") != "stampede; fwd=miss; stored" {
		t.Errorf("%d %q [%s], %d origin calls; want the one call's 200, stored", rec.Code, rec.Body, rec.Header().Get("Cache-Status"), o.calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if hits[key] != 2 {
		t.Errorf("Hooks.Hit counted %d for one request, want 2 (the tier's answer, the drop's Peek)", hits[key])
	}
}

// TestHitKeepsConnectionStack: a hit from the tier, its body large enough
// that net/http writes the head while the handler runs, does not make
// net/http's connection goroutine grow its stack. Between requests a
// collection shrinks the goroutine's stack to 8 KiB (it waits for the next
// request using less than a quarter of 16 KiB); net/http's own frames for
// writing a head take about 4.5 KiB of that, on top of the handler's. The
// hit wrote its body from deep in the middleware and crossed 8 KiB: after
// every collection each connection's stack was copied to a new one, 3-4 %
// of a node's CPU in BenchmarkHTTPPeers (47 of 48 hits here). A stack that
// grows is copied, so a local variable's address tells. A hit may still
// grow it now and then, when a collection runs during it; the first hit
// decodes the entry for those after it, and one the tier did not answer
// read Redis: neither is counted.
func TestHitKeepsConnectionStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's frames are larger: the depths are not a build's")
	}
	if bits.UintSize != 64 {
		t.Skip("frames on a 32-bit build differ: the depths are a 64-bit build's")
	}
	var local atomic.Bool // the last lookup was the tier's
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{Hooks: guard.Hooks{
		Hit: func(_ string, _ time.Duration, fromTier bool) { local.Store(fromTier) },
	}})
	body := []byte(strings.Repeat("x", 10<<10))
	mw := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write(body)
	}))
	var moved, hits, first atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local.Store(false)
		before := stackMark()
		mw.ServeHTTP(w, r)
		grew := stackMark() != before
		if w.Header().Get("Cache-Status") != "stampede; hit" || !local.Load() || first.Add(1) == 1 {
			return
		}
		hits.Add(1)
		if grew {
			moved.Add(1)
		}
	}))
	defer srv.Close()
	client := srv.Client()
	for range 100 {
		runtime.GC()
		resp, err := client.Get(srv.URL + "/stack")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if n != int64(len(body)) {
			t.Fatalf("a response of %d bytes, want %d", n, len(body))
		}
	}
	if hits.Load() < 50 {
		t.Fatalf("%d of 100 requests were tier hits after the first: not the path under test", hits.Load())
	}
	if m := moved.Load(); m > hits.Load()/10 {
		t.Errorf("the connection goroutine's stack grew during %d of %d tier hits", m, hits.Load())
	}
}

// stackMark is the address of a variable on the caller's goroutine stack
// at a fixed depth: it changes when the stack is copied to a larger one.
//
//go:noinline
func stackMark() uintptr {
	var b byte
	return uintptr(unsafe.Pointer(&b))
}
