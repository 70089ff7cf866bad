package guardecho_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	guardecho "github.com/stampede-go/stampede/middleware/echov5"
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

	e := echo.New()
	e.Use(guardecho.Middleware(g))
	calls := 0
	e.GET("/users/:id", func(c *echo.Context) error {
		calls++
		return c.String(http.StatusOK, "user "+c.Param("id"))
	})

	for range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/users/7", nil))
		fmt.Println(rec.Header().Get("Cache-Status"), "|", rec.Body)
	}
	fmt.Println("handler calls:", calls)
	// Output:
	// stampede; fwd=miss; stored | user 7
	// stampede; hit | user 7
	// handler calls: 1
}

func ExampleMiddlewareWithConfig() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	e := echo.New()
	e.Use(guardecho.MiddlewareWithConfig(g, guardecho.Config{
		Skipper:    func(c *echo.Context) bool { return c.Path() == "/health" },
		KeyHeaders: []string{"Accept-Language"},
	}))
	e.GET("/hello", func(c *echo.Context) error {
		if c.Request().Header.Get("Accept-Language") == "fr" {
			return c.String(http.StatusOK, "bonjour")
		}
		return c.String(http.StatusOK, "hello")
	})
	for _, lang := range []string{"fr", "en", "fr"} {
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.Header.Set("Accept-Language", lang)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(rec.Body, "|", rec.Header().Get("Cache-Status"))
	}
	// Output:
	// bonjour | stampede; fwd=miss; stored
	// hello | stampede; fwd=miss; stored
	// bonjour | stampede; hit
}
