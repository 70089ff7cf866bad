package guardgin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	guardgin "github.com/stampede-go/stampede/middleware/gin"
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

	r := gin.New()
	r.Use(guardgin.Middleware(g, guardgin.Config{}))
	calls := 0
	r.GET("/users/:id", func(c *gin.Context) {
		calls++
		c.String(http.StatusOK, "user "+c.Param("id"))
	})

	for range 2 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/users/7", nil))
		fmt.Println(rec.Header().Get("Cache-Status"), "|", rec.Body)
	}
	fmt.Println("handler calls:", calls)
	// Output:
	// stampede; fwd=miss; stored | user 7
	// stampede; hit | user 7
	// handler calls: 1
}

// On one route, with a key of the application's own and a Skipper.
func ExampleMiddleware_route() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	cache := guardgin.Middleware(g, guardgin.Config{
		Skipper: func(c *gin.Context) bool { return c.Query("fresh") == "1" },
		KeyFunc: func(c *gin.Context) string { return "product:" + c.Param("id") },
	})
	r := gin.New()
	r.GET("/products/:id", cache, func(c *gin.Context) {
		c.String(http.StatusOK, "product "+c.Param("id"))
	})
	for _, target := range []string{"/products/1?utm=a", "/products/1?utm=b", "/products/1?fresh=1"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		fmt.Printf("%s | %q\n", rec.Body, rec.Header().Get("Cache-Status"))
	}
	// Output:
	// product 1 | "stampede; fwd=miss; stored"
	// product 1 | "stampede; hit"
	// product 1 | ""
}
