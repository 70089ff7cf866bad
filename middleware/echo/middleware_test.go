package guardecho_test

import (
	"errors"
	"fmt"
	"io"
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
)

func newGroup(t *testing.T) *guard.Group {
	t.Helper()
	_, rdb := redistest.Mini(t)
	// A generous RedisTimeout: a loaded machine must not turn an answer
	// into a degraded one.
	g, err := guard.New(rdb, guard.Options{FreshFor: time.Hour, RedisTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
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

// TestConformance: the echo adapter holds the engine's rules; each row
// sends two requests and counts handler calls (1: shared, 2: not).
func TestConformance(t *testing.T) {
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
		{"query order canonical", guardecho.Config{}, item, get("/items/7?v=1&w=2"), get("/items/7?w=2&v=1"), 1, "item 7 1"},
		{"query value differs", guardecho.Config{}, item, get("/items/7?v=1"), get("/items/7?v=2"), 2, "item 7 2"},
		{"Authorization bypasses", guardecho.Config{}, item, get("/items/7", "Authorization", "x"), get("/items/7"), 2, "item 7 "},
		{"Cookie bypasses", guardecho.Config{}, item, get("/items/7", "Cookie", "s=1"), get("/items/7"), 2, "item 7 "},
		{"Set-Cookie not shared", guardecho.Config{}, func(c echo.Context) error {
			c.SetCookie(&http.Cookie{Name: "s", Value: "1"})
			return c.String(http.StatusOK, "private")
		}, get("/items/7"), get("/items/7"), 2, "private"},
		{"Cache-Control private not shared", guardecho.Config{}, func(c echo.Context) error {
			c.Response().Header().Set("Cache-Control", "private")
			return c.String(http.StatusOK, "p")
		}, get("/items/7"), get("/items/7"), 2, "p"},
		{"5xx not shared", guardecho.Config{}, func(c echo.Context) error { return c.String(http.StatusBadGateway, "bad") }, get("/items/7"), get("/items/7"), 2, "bad"},
		{"handler error rendered by echo, not cached", guardecho.Config{}, func(c echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "no tea") }, get("/items/7"), get("/items/7"), 2, `{"message":"no tea"}` + "\n"},
		{"404 HTTPError not cached", guardecho.Config{}, func(c echo.Context) error { return echo.ErrNotFound }, get("/items/7"), get("/items/7"), 2, `{"message":"Not Found"}` + "\n"},
		{"Skipper runs the handler", guardecho.Config{Skipper: func(c echo.Context) bool { return c.QueryParam("skip") != "" }}, item, get("/items/7?skip=1"), get("/items/7?skip=1"), 2, "item 7 "},
		{"KeyFunc", guardecho.Config{KeyFunc: func(c echo.Context) string { return c.Param("id") }}, item, get("/items/7?v=1"), get("/items/7?v=2"), 1, "item 7 1"},
		{"body over MaxBodyBytes streamed, not stored", guardecho.Config{MaxBodyBytes: 4}, item, get("/items/7"), get("/items/7"), 2, "item 7 "},
		{"HEAD from GET entry", guardecho.Config{}, item, get("/items/7"), httptest.NewRequest(http.MethodHead, "/items/7", nil), 1, ""},
		{"Host differs", guardecho.Config{}, item, get("/items/7"), withHost(get("/items/7"), "other.example"), 2, "item 7 "},
		{"Range bypasses", guardecho.Config{}, item, get("/items/7", "Range", "bytes=0-1"), get("/items/7"), 2, "item 7 "},
		{"Upgrade bypasses", guardecho.Config{}, item, get("/items/7", "Connection", "Upgrade", "Upgrade", "websocket"), get("/items/7"), 2, "item 7 "},
		{"SSE request bypasses", guardecho.Config{}, item, get("/items/7", "Accept", "text/event-stream"), get("/items/7"), 2, "item 7 "},
		{"Cache-Control no-store not shared", guardecho.Config{}, withHeader(item, "Cache-Control", "no-store"), get("/items/7"), get("/items/7"), 2, "item 7 "},
		{"Vary star not shared", guardecho.Config{}, withHeader(item, "Vary", "*"), get("/items/7"), get("/items/7"), 2, "item 7 "},
		{"206 not shared even if configured", guardecho.Config{Statuses: []int{200, 206}}, func(c echo.Context) error { return c.String(http.StatusPartialContent, "pa") }, get("/items/7"), get("/items/7"), 2, "pa"},
		{"Statuses configured", guardecho.Config{Statuses: []int{202}}, func(c echo.Context) error { return c.String(http.StatusAccepted, "ok") }, get("/items/7"), get("/items/7"), 1, "ok"},
		{"client no-cache ignored by default", guardecho.Config{}, item, get("/items/7"), get("/items/7", "Cache-Control", "no-cache"), 1, "item 7 "},
		{"client no-cache honoured when configured", guardecho.Config{HonorClientNoCache: true}, item, get("/items/7"), get("/items/7", "Cache-Control", "no-cache"), 2, "item 7 "},
		{"unlisted header ignored", guardecho.Config{}, item, get("/items/7", "Accept-Language", "fr"), get("/items/7", "Accept-Language", "de"), 1, "item 7 "},
		{"KeyHeaders split keys", guardecho.Config{KeyHeaders: []string{"Accept-Language"}}, item, get("/items/7", "Accept-Language", "fr"), get("/items/7", "Accept-Language", "de"), 2, "item 7 "},
		{"upstream max-age ignored by default", guardecho.Config{}, withHeader(item, "Cache-Control", "max-age=0"), get("/items/7"), get("/items/7"), 1, "item 7 "},
		{"upstream max-age=0 honoured when configured", guardecho.Config{UpstreamWindows: true}, withHeader(item, "Cache-Control", "max-age=0"), get("/items/7"), get("/items/7"), 2, "item 7 "},
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

func withHost(r *http.Request, host string) *http.Request { r.Host = host; return r }

// withHeader returns h setting a response header first.
func withHeader(h echo.HandlerFunc, k, v string) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(k, v)
		return h(c)
	}
}

// TestHitHeaders: a hit carries Age and Cache-Status, which never shows
// the key, as net/http's middleware does.
func TestHitHeaders(t *testing.T) {
	e, _ := app(t, guardecho.Config{}, func(c echo.Context) error { return c.String(http.StatusOK, "x") })
	first := do(e, get("/items/1"))
	second := do(e, get("/items/1"))
	if got := first.Header().Get("Cache-Status"); got != "stampede; fwd=miss; stored" {
		t.Errorf("first Cache-Status %q", got)
	}
	if got := second.Header().Get("Cache-Status"); got != "stampede; hit" {
		t.Errorf("second Cache-Status %q", got)
	}
	if got := second.Header().Get("Age"); got != "0" {
		t.Errorf("Age %q, want 0", got)
	}
}

// TestPanic: a handler panic is a 500 rendered by echo; a panic with
// http.ErrAbortHandler reaches net/http as it is, to abort the connection.
func TestPanic(t *testing.T) {
	g := newGroup(t)
	e := echo.New()
	e.Use(guardecho.Middleware(g))
	e.GET("/boom", func(echo.Context) error { panic("boom") })
	e.GET("/abort", func(echo.Context) error { panic(http.ErrAbortHandler) })
	if rec := do(e, get("/boom")); rec.Code != http.StatusInternalServerError {
		t.Errorf("panic answered %d, want 500", rec.Code)
	}
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		do(e, get("/abort"))
	}()
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

// TestCoalescing: concurrent requests on one echo server for a cold route
// cost one handler call; a panic answers 500 through echo.
func TestCoalescing(t *testing.T) {
	noLeaks(t)
	const n = 20
	var arrived atomic.Int64
	all := make(chan struct{})
	e, calls := app(t, guardecho.Config{}, func(c echo.Context) error {
		if c.Param("id") == "panic" {
			panic("boom")
		}
		<-all
		return c.String(http.StatusOK, "once")
	})
	e.Pre(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if arrived.Add(1) == n {
				close(all)
			}
			return next(c)
		}
	})
	srv := httptest.NewServer(e)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := client.Get(srv.URL + "/items/1")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if string(b) != "once" {
				t.Errorf("body %q", b)
			}
		})
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Errorf("handler calls %d, want 1", calls.Load())
	}
	resp, err := client.Get(srv.URL + "/items/panic")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("panic answered %d, want 500", resp.StatusCode)
	}
}

// noLeaks checks, after the test's cleanups, that it left no goroutine.
func noLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}
