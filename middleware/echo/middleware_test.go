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
	"github.com/stampede-go/stampede/internal/redistest"
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

// tenantContext is a custom context, echo's documented way to extend it.
type tenantContext struct {
	echo.Context
	extra string
}

// TestValuesReachEveryRun: values earlier middleware set with c.Set reach
// the handler on the request's own run and on a detached refresh, which
// runs after the request's context went back to echo's pool; with echo's
// context, and with a custom context that embeds it.
func TestValuesReachEveryRun(t *testing.T) {
	for _, custom := range []bool{false, true} {
		t.Run(fmt.Sprintf("custom context %v", custom), func(t *testing.T) {
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
					return func(c echo.Context) error {
						c.Set("tenant", "acme")
						if custom {
							return next(&tenantContext{Context: c, extra: "x"})
						}
						return next(c)
					}
				})
				e.Use(guardecho.Middleware(g))
				e.GET("/t", func(c echo.Context) error {
					body := fmt.Sprintf("tenant=%v", c.Get("tenant"))
					if calls.Add(1) == 2 {
						refreshed <- body
					}
					return c.String(http.StatusOK, body)
				})
				return g, e
			}
			_, e1 := node()
			if rec := do(e1, get("/t")); rec.Body.String() != "tenant=acme" || rec.Header().Get("Cache-Status") != "stampede; fwd=miss; stored" {
				t.Fatalf("the request's own run: %q %v", rec.Body, rec.Header())
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
		})
	}
}

// TestUnreadableContextBypasses: a context that is neither echo's nor
// embeds it cannot hand its values to a detached run: its requests go
// straight to the handler.
func TestUnreadableContextBypasses(t *testing.T) {
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(opaqueContext{c}) }
	})
	e.Use(guardecho.Middleware(newGroup(t)))
	var calls atomic.Int64
	e.GET("/t", func(c echo.Context) error { calls.Add(1); return c.String(http.StatusOK, "x") })
	for range 2 {
		if rec := do(e, get("/t")); rec.Header().Get("Cache-Status") != `stampede; fwd=bypass; detail="echo context not readable"` {
			t.Errorf("Cache-Status %q", rec.Header().Get("Cache-Status"))
		}
	}
	if calls.Load() != 2 {
		t.Errorf("%d calls, want 2", calls.Load())
	}
}

// opaqueContext embeds echo.Context under another name (an alias): the
// middleware cannot tell it holds echo's context.
type opaqueContext struct{ innerContext }

type innerContext = echo.Context
