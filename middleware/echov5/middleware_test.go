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

	"github.com/labstack/echo/v5"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardecho "github.com/stampede-go/stampede/middleware/echov5"
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
	e.GET("/items/:id", func(c *echo.Context) error {
		calls.Add(1)
		return h(c)
	})
	return e, calls
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func get(target string) *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }

// TestEcho holds the rows of echo v5's own idiom (path values, handler
// errors and echo's sentinel errors, Skipper and KeyFunc on *echo.Context);
// the rules every adapter shares run in TestRules. Each row sends two
// requests and counts handler calls (1: shared, 2: not).
func TestEcho(t *testing.T) {
	item := func(c *echo.Context) error {
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
		{"shared, path value seen by the detached run", guardecho.Config{}, item, get("/items/7"), get("/items/7"), 1, "item 7 "},
		{"handler error rendered by echo, not cached", guardecho.Config{}, func(c *echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "no tea") }, get("/items/7"), get("/items/7"), 2, `{"message":"no tea"}` + "\n"},
		{"sentinel ErrNotFound not cached", guardecho.Config{}, func(c *echo.Context) error { return echo.ErrNotFound }, get("/items/7"), get("/items/7"), 2, `{"message":"Not Found"}` + "\n"},
		{"Skipper runs the handler", guardecho.Config{Skipper: func(c *echo.Context) bool { return c.QueryParam("skip") != "" }}, item, get("/items/7?skip=1"), get("/items/7?skip=1"), 2, "item 7 "},
		{"KeyFunc", guardecho.Config{KeyFunc: func(c *echo.Context) string { return c.Param("id") }}, item, get("/items/7?v=1"), get("/items/7?v=2"), 1, "item 7 1"},
		{"KeyFunc empty does not share", guardecho.Config{KeyFunc: func(c *echo.Context) string { return "" }}, item, get("/items/7"), get("/items/7"), 2, "item 7 "},
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

// TestPlacement: the middleware works where echo v5 lets it be placed,
// global (Use), on a group and on one route; its detached run reaches the
// route's handler and path values in each, and on a group or a route
// passes the middleware itself through rather than serving the run's
// request through the cache again.
func TestPlacement(t *testing.T) {
	placements := map[string]func(e *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc){
		"Use": func(e *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) { e.Use(mw); e.GET("/api/items/:id", h) },
		"Group": func(e *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) {
			e.Group("/api", mw).GET("/items/:id", h)
		},
		"route": func(e *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) { e.GET("/api/items/:id", h, mw) },
	}
	for name, place := range placements {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := echo.New()
			var calls atomic.Int64
			place(e, guardecho.Middleware(newGroup(t)), func(c *echo.Context) error {
				calls.Add(1)
				return c.String(http.StatusOK, "item "+c.Param("id"))
			})
			for i, want := range []string{"stampede; fwd=miss; stored", "stampede; hit"} {
				rec := do(e, get("/api/items/9"))
				if rec.Code != 200 || rec.Body.String() != "item 9" || rec.Header().Get("Cache-Status") != want {
					t.Errorf("request %d: %d %q %q, want 200 \"item 9\" %q", i+1, rec.Code, rec.Body, rec.Header().Get("Cache-Status"), want)
				}
			}
			if got := calls.Load(); got != 1 {
				t.Errorf("handler calls %d, want 1", got)
			}
		})
	}
}

// TestErrorsReachErrorHandler: the error of the run made for a request is
// returned to echo for that request, so its HTTPErrorHandler sees it
// (wrapped errors intact); the engine's own answers (here 500 for a panic)
// are *echo.HTTPError wrapping the cause.
func TestErrorsReachErrorHandler(t *testing.T) {
	e, calls := app(t, guardecho.Config{}, func(c *echo.Context) error {
		if c.Param("id") == "panic" {
			panic("boom")
		}
		return fmt.Errorf("db down for %s: %w", c.Param("id"), errBoom)
	})
	var seen []error
	var mu sync.Mutex
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
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
	if calls.Load() != 2 {
		t.Errorf("calls %d, want 2 (an error is never cached)", calls.Load())
	}
	if len(seen) != 2 || !errors.Is(seen[0], errBoom) || !errors.Is(seen[1], errBoom) {
		t.Fatalf("error handler saw %v", seen)
	}
	// A panic answers its own request as it would without the
	// middleware: panicked again on the request's goroutine, with its
	// value, for echo's Recover middleware (or net/http) to handle.
	p := func() (p any) {
		defer func() { p = recover() }()
		do(e, get("/items/panic"))
		return nil
	}()
	if p != "boom" {
		t.Errorf("recovered %v, want the handler's own panic", p)
	}
}

var errBoom = errors.New("boom")

// TestValuesReachEveryRun: values earlier middleware set with c.Set reach
// the handler on the request's own run and on a detached refresh, which
// runs after the request's context went back to echo's pool.
func TestValuesReachEveryRun(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	ns := redistest.Key(t) + ":"
	refreshed := make(chan string, 1)
	var calls atomic.Int64
	node := func() (*guard.Group, *echo.Echo) {
		g := conformance.NewGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Minute, StaleFor: time.Hour, Jitter: guard.Disabled})
		e := echo.New()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error { c.Set("tenant", "acme"); return next(c) }
		})
		e.Use(guardecho.Middleware(g))
		e.GET("/t", func(c *echo.Context) error {
			body := fmt.Sprintf("tenant=%v", c.Get("tenant"))
			if calls.Add(1) == 2 {
				refreshed <- body
			}
			return c.String(http.StatusOK, body)
		})
		return g, e
	}
	_, e1 := node()
	if rec := do(e1, get("/t")); rec.Body.String() != "tenant=acme" {
		t.Fatalf("the request's own run got %q", rec.Body)
	}
	mr.SetTime(now.Add(2 * time.Minute))
	g2, e2 := node()
	if rec := do(e2, get("/t")); rec.Header().Get("Cache-Status") != "stampede; fwd=stale" {
		t.Fatalf("want a stale answer and a refresh, got %v", rec.Header())
	}
	if err := g2.Close(); err != nil { // waits for the refresh
		t.Fatal(err)
	}
	if got := <-refreshed; got != "tenant=acme" {
		t.Errorf("the detached refresh got %q", got)
	}
	if !guardecho.StoreKnown() {
		t.Error("echo's context layout is not the one the middleware reads values from")
	}
}
