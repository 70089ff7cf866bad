package guardecho_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v5"

	guardecho "github.com/stampede-go/stampede/middleware/echov5"
)

// TestLaterUseMiddlewareRuns: echo v5 runs the global middleware (e.Use)
// around the route's handler, outside what Router().Route returns, and the
// handler run called only that: a middleware registered after the cache
// never ran, for the request whose miss it was too, and the response made
// without it (no security header, no locale) was stored for everyone; a
// Recover after the cache let a panic abort the connection. The run now
// wraps the route's handler in the global middleware after the cache.
func TestLaterUseMiddlewareRuns(t *testing.T) {
	e := echo.New()
	e.Use(guardecho.Middleware(newGroup(t)))
	ran := 0
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			ran++
			c.Set("locale", "fr")
			c.Response().Header().Set("X-Frame-Options", "DENY")
			return next(c)
		}
	})
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // a recover middleware
		return func(c *echo.Context) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = echo.NewHTTPError(http.StatusInternalServerError, "recovered")
				}
			}()
			return next(c)
		}
	})
	e.GET("/x", func(c *echo.Context) error {
		l, _ := c.Get("locale").(string)
		return c.String(http.StatusOK, "locale="+l)
	})
	e.GET("/panics", func(*echo.Context) error { panic("boom") })
	for i := range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
		if rec.Body.String() != "locale=fr" || rec.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("request %d: %q, X-Frame-Options %q (%s); want locale=fr, DENY", i+1, rec.Body, rec.Header().Get("X-Frame-Options"), rec.Header().Get("Cache-Status"))
		}
	}
	if ran != 1 {
		t.Errorf("the later middleware ran %d times for a miss and a hit; want 1", ran)
	}
	rec := httptest.NewRecorder()
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("a panic went past the Recover registered after the cache: %v", p)
			}
		}()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/panics", nil))
	}()
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("a panicking handler behind Recover: status %d, want 500", rec.Code)
	}
}

// TestGroupCacheRunsGlobalsOnce: with the cache a group's middleware, the
// global middleware all ran before it, for the request: the handler run
// does not run them again.
func TestGroupCacheRunsGlobalsOnce(t *testing.T) {
	e := echo.New()
	ran := 0
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			ran++
			return next(c)
		}
	})
	grp := e.Group("/g", guardecho.Middleware(newGroup(t)))
	grp.GET("/x", func(c *echo.Context) error { return c.String(http.StatusOK, "x") })
	for range 2 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/g/x", nil))
		if rec.Body.String() != "x" {
			t.Fatalf("got %q", rec.Body)
		}
	}
	if ran != 2 {
		t.Errorf("the global middleware ran %d times for two requests; want 2", ran)
	}
}
