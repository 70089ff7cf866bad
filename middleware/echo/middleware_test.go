package guardecho_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/guard"
	guardecho "github.com/stampede-go/stampede/middleware/echo"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
)

func newGroup(t *testing.T) *guard.Group {
	return conformance.MiniGroup(t, guard.Options{FreshFor: time.Hour})
}

// app returns an echo app with the middleware and a counted route.
func app(t *testing.T, cfg guardecho.Config, h echo.HandlerFunc) (*echo.Echo, *atomic.Int64) {
	e := echo.New()
	e.Use(guardecho.MiddlewareWithConfig(newGroup(t), cfg))
	calls := new(atomic.Int64)
	e.GET("/items/:id", func(c echo.Context) error {
		calls.Add(1)
		return h(c)
	})
	return e, calls
}

func do(e *echo.Echo, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, r)
	return rec
}

func get(target string, kv ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	return r
}

// TestEcho holds the rows of echo's own idiom (path parameters, handler
// errors, Skipper, KeyFunc on echo.Context); the rules every adapter shares
// run in TestRules. Each row sends two requests and counts handler calls
// (1: shared, 2: not).
func TestEcho(t *testing.T) {
	item := func(c echo.Context) error {
		return c.String(http.StatusOK, "item "+c.Param("id")+" "+c.QueryParam("v"))
	}
	rows := []struct {
		name       string
		cfg        guardecho.Config
		h          echo.HandlerFunc
		req1, req2 *http.Request
		wantCalls  int64
		wantBody2  string
	}{
		{"shared, path param seen by the detached run", guardecho.Config{}, item, get("/items/7"), get("/items/7"), 1, "item 7 "},
		{"handler error rendered by echo, not cached", guardecho.Config{}, func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "no tea") }, get("/items/7"), get("/items/7"), 2, `{"message":"no tea"}` + "\n"},
		{"404 HTTPError not cached", guardecho.Config{}, func(c echo.Context) error { return echo.ErrNotFound }, get("/items/7"), get("/items/7"), 2, `{"message":"Not Found"}` + "\n"},
		{"Skipper runs the handler", guardecho.Config{Skipper: func(c echo.Context) bool { return c.QueryParam("skip") != "" }}, item, get("/items/7?skip=1"), get("/items/7?skip=1"), 2, "item 7 "},
		{"KeyFunc", guardecho.Config{KeyFunc: func(c echo.Context) string { return c.Param("id") }}, item, get("/items/7?v=1"), get("/items/7?v=2"), 1, "item 7 1"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			e, calls := app(t, row.cfg, row.h)
			first := do(e, row.req1)
			second := do(e, row.req2)
			if got := calls.Load(); got != row.wantCalls {
				t.Errorf("handler calls %d, want %d", got, row.wantCalls)
			}
			if got := second.Body.String(); got != row.wantBody2 {
				t.Errorf("second body %q, want %q", got, row.wantBody2)
			}
			if first.Code != second.Code {
				t.Errorf("statuses %d, %d", first.Code, second.Code)
			}
			if row.wantCalls == 2 && second.Header().Get("Cache-Status") == "stampede; hit" {
				t.Errorf("second response is a hit")
			}
		})
	}
}

// TestHandlerErrorReachesErrorHandler: the error of the run made for a
// request is returned to echo for that request (its HTTPErrorHandler and
// middleware see it); concurrent requests run the handler themselves.
func TestHandlerErrorReachesErrorHandler(t *testing.T) {
	noLeaks(t)
	e, calls := app(t, guardecho.Config{}, func(c echo.Context) error {
		return fmt.Errorf("db down for %s: %w", c.Param("id"), errBoom)
	})
	var seen []error
	var mu sync.Mutex
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		mu.Lock()
		seen = append(seen, err)
		mu.Unlock()
		_ = c.String(599, err.Error())
	}
	for range 2 {
		rec := do(e, get("/items/3"))
		if rec.Code != 599 || rec.Body.String() != "db down for 3: boom" {
			t.Errorf("answer %d %q", rec.Code, rec.Body)
		}
	}
	if len(seen) != 2 || !errors.Is(seen[0], errBoom) {
		t.Errorf("error handler saw %v", seen)
	}
	if calls.Load() != 2 {
		t.Errorf("calls %d, want 2", calls.Load())
	}
}

var errBoom = errors.New("boom")

// noLeaks checks, after the test's cleanups, that it left no goroutine.
func noLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}
