package guard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/stampede-go/stampede/guard"
)

// A readiness probe: 503 with the failed checks only when Redis refuses
// what the Group needs (an ACL, a server without Lua); a Redis outage
// leaves it ready, since the node serves meanwhile. The request has no
// deadline, so Ready is bounded by guard.ReadyTimeout.
func ExampleGroup_Ready() {
	rdb, stop := newRedis()
	defer stop()
	g, err := guard.New(rdb, guard.Options{Namespace: "catalog:"})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	readyz := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})

	rec := httptest.NewRecorder()
	readyz.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	fmt.Print(rec.Code, " ", rec.Body)
	// Output: 200 ready
}
