package httpcache

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestGarbageEntry: an entry that does not decode is a miss: the handler
// runs, and its response replaces the garbage.
func TestGarbageEntry(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	key := defaultKey(httptest.NewRequest(http.MethodGet, "/a", nil), nil)
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
