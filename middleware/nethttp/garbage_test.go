package guardhttp_test

import (
	"context"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/internal/httpcache"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// TestGarbageEntry: an entry that does not decode is a miss: the handler
// runs, and its response replaces the garbage.
func TestGarbageEntry(t *testing.T) {
	g := miniGroup(t, guard.Options{})
	req := get("/a")
	key := httpcache.DeriveKey(req, nil)
	for _, garbage := range []string{"", "garbage", "shr\x01\xc8\x01", "shr\x01\xc8\x01\x01\x0aSet-Cookie\x01\x01x\x00"} {
		if err := g.Invalidate(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return []byte(garbage), nil }); err != nil {
			t.Fatal(err)
		}
		o := &origin{}
		h := guardhttp.Middleware(g, guardhttp.Config{})(o)
		if rec := serve(h, get("/a")); rec.Code != 200 || rec.Body.String() != "call 1 GET /a" || rec.Header().Get("Set-Cookie") != "" {
			t.Errorf("garbage %q: %d %q %v", garbage, rec.Code, rec.Body, rec.Header())
		}
		if rec := serve(h, get("/a")); rec.Header().Get("Cache-Status") != "stampede; hit" {
			t.Errorf("garbage %q was not replaced: %v", garbage, rec.Header())
		}
		if got := o.calls.Load(); got != 1 {
			t.Errorf("garbage %q: handler calls %d, want 1", garbage, got)
		}
	}
}
