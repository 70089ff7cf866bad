package guardhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

func ExampleMiddleware() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	calls := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /price", func(w http.ResponseWriter, r *http.Request) {
		calls++
		fmt.Fprintln(w, "42 EUR")
	})
	h := guardhttp.Middleware(g, guardhttp.Config{})(mux)

	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/price?b=2&a=1", nil))
		fmt.Printf("%s | %s", rec.Header().Get("Cache-Status"), rec.Body)
	}
	fmt.Println("handler calls:", calls)
	// Output:
	// stampede; fwd=miss; stored | 42 EUR
	// stampede; hit | 42 EUR
	// handler calls: 1
}
