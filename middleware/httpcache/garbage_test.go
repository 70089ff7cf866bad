package httpcache

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestGarbageEntry: an entry that does not decode is a miss: the handler
// runs, and its response replaces the garbage.
func TestGarbageEntry(t *testing.T) {
	g, key := garbageGroup(t)
	for _, garbage := range []string{"", "garbage", "shr\x01\xc8\x01", "shr\x01\xc8\x01\x01\x0aSet-Cookie\x01\x01x\x00"} {
		if err := g.Invalidate(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return []byte(garbage), nil }); err != nil {
			t.Fatal(err)
		}
		eng, err := New(g, Config[*http.Request]{})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		run := func(w http.ResponseWriter, r *http.Request) error {
			calls++
			fmt.Fprintf(w, "call %d %s %s", calls, r.Method, r.URL.RequestURI())
			return nil
		}
		serve := func() *httptest.ResponseRecorder {
			rec, r := httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/a", nil)
			if err := eng.Serve(r, rec, r, nil, run); err != nil {
				t.Fatal(err)
			}
			return rec
		}
		if rec := serve(); rec.Code != 200 || rec.Body.String() != "call 1 GET /a" || rec.Header().Get("Set-Cookie") != "" {
			t.Errorf("garbage %q: %d %q %v", garbage, rec.Code, rec.Body, rec.Header())
		}
		if rec := serve(); rec.Header().Get("Cache-Status") != "stampede; hit" {
			t.Errorf("garbage %q was not replaced: %v", garbage, rec.Header())
		}
		if calls != 1 {
			t.Errorf("garbage %q: handler calls %d, want 1", garbage, calls)
		}
	}
}

// TestGarbageEntryConcurrent: requests that find garbage under their key
// at once share one drop and one handler call: a request that read the
// garbage before another dropped it, and a call refilled it, does not drop
// the refill (which would run the handler again).
func TestGarbageEntryConcurrent(t *testing.T) {
	g, key := garbageGroup(t)
	for round := range 20 {
		if err := g.Invalidate(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return []byte("garbage"), nil }); err != nil {
			t.Fatal(err)
		}
		eng, err := New(g, Config[*http.Request]{})
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		run := func(w http.ResponseWriter, r *http.Request) error {
			fmt.Fprintf(w, "call %d", calls.Add(1))
			return nil
		}
		const n = 16
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				rec, r := httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/a", nil)
				if err := eng.Serve(r, rec, r, nil, run); err != nil {
					t.Error(err)
				}
				if rec.Code != 200 || rec.Body.String() != "call 1" {
					t.Errorf("round %d: %d %q, want the one call's 200", round, rec.Code, rec.Body)
				}
			})
		}
		wg.Wait()
		if got := calls.Load(); got != 1 {
			t.Fatalf("round %d: %d handler calls for %d requests, want 1", round, got, n)
		}
	}
}

// garbageGroup returns a Group on miniredis and the key of GET /a.
func garbageGroup(t *testing.T) (*guard.Group, string) {
	_, rdb := redistest.Mini(t)
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g, defaultKey(httptest.NewRequest(http.MethodGet, "/a", nil), nil)
}
