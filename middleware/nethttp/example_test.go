package guardhttp_test

import (
	"cmp"
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

// A handler builds links from X-Forwarded-Host, as applications behind a
// load balancer do. A client sending the header itself is served its own
// response, and the next client is not served that one.
func ExampleConfig_forwarding() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	h := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := cmp.Or(r.Header.Get("X-Forwarded-Host"), r.Host)
		fmt.Fprintf(w, "<script src=\"https://%s/app.js\">\n", host)
	}))
	for _, fwd := range []string{"evil.example", "", ""} {
		r := httptest.NewRequest(http.MethodGet, "http://shop.example/", nil)
		if fwd != "" {
			r.Header.Set("X-Forwarded-Host", fwd)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		fmt.Printf("%s | %s", rec.Header().Get("Cache-Status"), rec.Body)
	}
	// Output:
	// stampede; fwd=miss; stored | <script src="https://evil.example/app.js">
	// stampede; fwd=miss; stored | <script src="https://shop.example/app.js">
	// stampede; hit | <script src="https://shop.example/app.js">
}

// The middleware wraps a whole mux; Skipper leaves out the routes each
// instance answers for itself (metrics, health and readiness probes),
// which must never be shared across the fleet. They reach the handler
// untouched, without Cache-Status.
func ExampleConfig_skipper() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	scrapes := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		scrapes++
		fmt.Fprintf(w, "scrapes %d\n", scrapes)
	})
	mux.HandleFunc("GET /price", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "42 EUR") })
	h := guardhttp.Middleware(g, guardhttp.Config{
		Skipper: func(r *http.Request) bool {
			switch r.URL.Path {
			case "/metrics", "/healthz", "/readyz":
				return true
			}
			return false
		},
	})(mux)

	for _, path := range []string{"/metrics", "/metrics", "/price", "/price"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("%s: %q | %s", path, rec.Header().Get("Cache-Status"), rec.Body)
	}
	// Output:
	// /metrics: "" | scrapes 1
	// /metrics: "" | scrapes 2
	// /price: "stampede; fwd=miss; stored" | 42 EUR
	// /price: "stampede; hit" | 42 EUR
}
