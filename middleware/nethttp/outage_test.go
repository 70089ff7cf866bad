package guardhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/outagetest"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// TestRedisOutageServesFromMemory: three handlers behind three nodes,
// paced GETs of 20 URLs, Redis killed for 6s: each node answers from
// memory (Cache-Status degraded or stale), no request fails, and the
// handler runs per URL and node at most once per FreshFor; then once per
// URL and refresh across the fleet again.
func TestRedisOutageServesFromMemory(t *testing.T) {
	srv := redistest.Start(t)
	var loads atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loads.Add(1)
		time.Sleep(20 * time.Millisecond) // the origin's query
		fmt.Fprintf(w, "item %s", r.URL.Path)
	})
	s := outagetest.Scenario{Nodes: 3, Keys: 20, FreshFor: 2 * time.Second, Outage: 6 * time.Second,
		Callers: 24, Pace: 5 * time.Millisecond, Loads: &loads}
	hits := &outagetest.LocalHits{}
	ns := redistest.Key(t) + ":"
	var nodes []http.Handler
	for i := range s.Nodes {
		g, err := guard.New(srv.Client(t), guard.Options{Namespace: ns, FreshFor: s.FreshFor, StaleFor: time.Minute,
			RedisTimeout: 250 * time.Millisecond, Hooks: guard.Hooks{Hit: hits.Hook(i)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		nodes = append(nodes, guardhttp.Middleware(g, guardhttp.Config{KeyHost: "shop.example"})(handler))
	}
	s.Held = func() bool { return hits.Held(s.Nodes, s.Keys) }
	s.Call = func(ctx context.Context, node, key int) error {
		r := httptest.NewRequest(http.MethodGet, "/item/"+strconv.Itoa(key), nil).WithContext(ctx)
		w := httptest.NewRecorder()
		nodes[node].ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), "item /item/") {
			return fmt.Errorf("%d %q (Cache-Status %q)", w.Code, w.Body, w.Header().Get("Cache-Status"))
		}
		return nil
	}
	s.Check(t, outagetest.Run(t, srv, s))
}
