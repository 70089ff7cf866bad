package guardgin_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardgin "github.com/stampede-go/stampede/middleware/gin"
	"github.com/stampede-go/stampede/middleware/internal/conformance"
)

func newGroup(t *testing.T) *guard.Group {
	return conformance.MiniGroup(t, guard.Options{FreshFor: time.Hour})
}

// app returns a gin engine with a middleware storing a key (as auth or
// request-id middleware do), then guardgin, then a counted route.
func app(t *testing.T, cfg guardgin.Config, h gin.HandlerFunc) (*gin.Engine, *atomic.Int64) {
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("tenant", "acme"); c.Next() })
	r.Use(guardgin.Middleware(newGroup(t), cfg))
	calls := new(atomic.Int64)
	r.GET("/items/:id", func(c *gin.Context) {
		calls.Add(1)
		h(c)
	})
	return r, calls
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func get(target string) *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }

var errDB = errors.New("db down")

// TestGin holds the rows of gin's own idiom (path parameters and keys seen
// by the detached run, errors in c.Errors, c.Status without a body,
// Skipper and KeyFunc on *gin.Context); the rules every adapter shares run
// in TestRules. Each row sends two requests and counts handler calls (1:
// shared, 2: not).
func TestGin(t *testing.T) {
	item := func(c *gin.Context) {
		c.String(http.StatusOK, "item %s %s %s", c.Param("id"), c.Query("v"), c.GetString("tenant"))
	}
	rows := []struct {
		name       string
		cfg        guardgin.Config
		h          gin.HandlerFunc
		req1, req2 *http.Request
		wantCalls  int64
		wantStatus int
		wantBody2  string
	}{
		{"shared, param and key seen by the detached run", guardgin.Config{}, item, get("/items/7"), get("/items/7"), 1, 200, "item 7  acme"},
		{"c.Error never cached", guardgin.Config{}, func(c *gin.Context) {
			_ = c.Error(errDB)
			c.String(http.StatusOK, "partial")
		}, get("/items/7"), get("/items/7"), 2, 200, "partial"},
		{"c.AbortWithError never cached", guardgin.Config{}, func(c *gin.Context) {
			_ = c.AbortWithError(http.StatusNotFound, errDB)
		}, get("/items/7"), get("/items/7"), 2, 404, ""},
		{"c.Status without a body shared", guardgin.Config{}, func(c *gin.Context) {
			c.Status(http.StatusNoContent)
			c.Header("X-After-Status", "1")
		}, get("/items/7"), get("/items/7"), 1, 204, ""},
		{"Skipper goes on down the chain", guardgin.Config{Skipper: func(c *gin.Context) bool { return c.Query("skip") != "" }}, item, get("/items/7?skip=1"), get("/items/7?skip=1"), 2, 200, "item 7  acme"},
		{"KeyFunc", guardgin.Config{KeyFunc: func(c *gin.Context) string { return c.Param("id") }}, item, get("/items/7?v=1"), get("/items/7?v=2"), 1, 200, "item 7 1 acme"},
		{"KeyFunc empty does not share", guardgin.Config{KeyFunc: func(c *gin.Context) string { return "" }}, item, get("/items/7"), get("/items/7"), 2, 200, "item 7  acme"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			r, calls := app(t, row.cfg, row.h)
			first := do(r, row.req1)
			second := do(r, row.req2)
			if got := calls.Load(); got != row.wantCalls {
				t.Errorf("handler calls %d, want %d", got, row.wantCalls)
			}
			if first.Code != row.wantStatus || second.Code != row.wantStatus {
				t.Errorf("statuses %d, %d; want %d", first.Code, second.Code, row.wantStatus)
			}
			if got := second.Body.String(); got != row.wantBody2 {
				t.Errorf("second body %q, want %q", got, row.wantBody2)
			}
			if row.wantCalls == 2 && second.Header().Get("Cache-Status") == "stampede; hit" {
				t.Errorf("second response is a hit")
			}
		})
	}
}

// TestErrorsInContext: the request whose handler run recorded errors finds
// them in its own c.Errors (for the app's error middleware), as does a
// request answered by the engine (a panic: 500).
func TestErrorsInContext(t *testing.T) {
	var seen []*gin.Error
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		seen = append(seen, c.Errors...)
	})
	r.Use(guardgin.Middleware(newGroup(t), guardgin.Config{}))
	r.GET("/fail", func(c *gin.Context) { _ = c.AbortWithError(http.StatusBadGateway, errDB) })
	r.GET("/panic", func(c *gin.Context) { panic("boom") })

	if rec := do(r, get("/fail")); rec.Code != http.StatusBadGateway {
		t.Errorf("/fail answered %d, want 502", rec.Code)
	}
	if len(seen) != 1 || !errors.Is(seen[0], errDB) {
		t.Fatalf("c.Errors after /fail: %v, want errDB", seen)
	}
	// A panic answers its own request as it would without the
	// middleware: panicked again on the request's goroutine, with its
	// value, for gin.Recovery (or net/http) to handle.
	if p := panicOf(r, get("/panic")); p != "boom" {
		t.Errorf("/panic: recovered %v, want the handler's own panic", p)
	}
	rr := gin.New()
	rr.Use(gin.Recovery(), guardgin.Middleware(newGroup(t), guardgin.Config{}))
	rr.GET("/panic", func(c *gin.Context) { panic("boom") })
	if rec := do(rr, get("/panic")); rec.Code != http.StatusInternalServerError {
		t.Errorf("/panic behind gin.Recovery answered %d, want 500", rec.Code)
	}
}

// panicOf serves r on h and returns what h panicked with, or nil.
func panicOf(h http.Handler, r *http.Request) (p any) {
	defer func() { p = recover() }()
	do(h, r)
	return nil
}

// TestChain: a hit ends the chain (c.Abort): no handler after the
// middleware runs for it, the route's included; a request that is not
// shared goes on down the chain (c.Next). A route with a handler between
// the middleware and its own, which a hit would skip, is served past the
// cache: every request runs the whole chain. On a route, the middleware
// works the same.
func TestChain(t *testing.T) {
	var after atomic.Int64
	r := gin.New()
	r.Use(guardgin.Middleware(newGroup(t), guardgin.Config{}))
	r.GET("/a", func(c *gin.Context) { after.Add(1); c.String(http.StatusOK, "a") })
	r.Use(func(c *gin.Context) { after.Add(1); c.Next() })
	r.GET("/b", func(c *gin.Context) { c.String(http.StatusOK, "b") })

	for i, want := range []string{"stampede; fwd=miss; stored", "stampede; hit"} {
		rec := do(r, get("/a"))
		if rec.Body.String() != "a" || rec.Header().Get("Cache-Status") != want {
			t.Errorf("request %d: %q %q, want \"a\" %q", i+1, rec.Body, rec.Header().Get("Cache-Status"), want)
		}
	}
	if got := after.Load(); got != 1 {
		t.Errorf("the route's handler ran %d times for two shared requests, want 1", got)
	}
	req := get("/a")
	req.Header.Set("Authorization", "Bearer x")
	if rec := do(r, req); rec.Body.String() != "a" || after.Load() != 2 {
		t.Errorf("a request not shared: %q, the route's handler ran %d times; want \"a\", 2", rec.Body, after.Load())
	}
	for i := range 2 {
		rec := do(r, get("/b"))
		if want := `stampede; fwd=bypass; detail="handlers after the cache"`; rec.Body.String() != "b" || rec.Header().Get("Cache-Status") != want || after.Load() != int64(3+i) {
			t.Errorf("/b request %d: %q %q, the handler between ran %d times; want \"b\" %q, %d", i+1, rec.Body, rec.Header().Get("Cache-Status"), after.Load()-2, want, i+1)
		}
	}
	routed := gin.New()
	routed.GET("/route", guardgin.Middleware(newGroup(t), guardgin.Config{}), func(c *gin.Context) { c.String(http.StatusOK, "route") })
	for i, want := range []string{"stampede; fwd=miss; stored", "stampede; hit"} {
		rec := do(routed, get("/route"))
		if rec.Body.String() != "route" || rec.Header().Get("Cache-Status") != want {
			t.Errorf("route request %d: %q %q, want \"route\" %q", i+1, rec.Body, rec.Header().Get("Cache-Status"), want)
		}
	}
}

// TestValuesReachEveryRun: values earlier middleware set with c.Set reach
// the handler on the request's own run and on a detached refresh, which
// runs after the request's context went back to gin's pool.
func TestValuesReachEveryRun(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	ns := redistest.Key(t) + ":"
	refreshed := make(chan string, 1)
	var calls atomic.Int64
	node := func() (*guard.Group, *gin.Engine) {
		g := conformance.NewGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Minute, StaleFor: time.Hour, Jitter: guard.Disabled})
		r := gin.New()
		r.Use(func(c *gin.Context) { c.Set("tenant", "acme"); c.Next() })
		r.Use(guardgin.Middleware(g, guardgin.Config{}))
		r.GET("/t", func(c *gin.Context) {
			v, _ := c.Get("tenant")
			body := "tenant=" + v.(string)
			if calls.Add(1) == 2 {
				refreshed <- body
			}
			c.String(http.StatusOK, body)
		})
		return g, r
	}
	_, r1 := node()
	if rec := do(r1, get("/t")); rec.Body.String() != "tenant=acme" {
		t.Fatalf("the request's own run got %q", rec.Body)
	}
	mr.SetTime(now.Add(2 * time.Minute))
	g2, r2 := node()
	if rec := do(r2, get("/t")); rec.Header().Get("Cache-Status") != "stampede; fwd=stale" {
		t.Fatalf("want a stale answer and a refresh, got %v", rec.Header())
	}
	if err := g2.Close(); err != nil { // waits for the refresh
		t.Fatal(err)
	}
	if got := <-refreshed; got != "tenant=acme" {
		t.Errorf("the detached refresh got %q", got)
	}
}

// TestUnroutedRequestPassesThrough: a request no route matches runs gin's
// NoRoute or NoMethod chain, whose last handler is this middleware (or one
// registered after it), not a route's. It goes on down the chain, so gin
// (or the app's NoRoute handler) answers as without the middleware, and
// nothing is stored. Before, the detached run called the middleware
// itself: the request waited LoadTimeout, then a 200 with no body was
// stored and served to every later request of the path.
func TestUnroutedRequestPassesThrough(t *testing.T) {
	for _, row := range []struct {
		name  string
		setup func(r *gin.Engine)
		req   *http.Request
		code  int
		body  string
		after bool // a middleware registered after guardgin
	}{
		{name: "no route", req: get("/nope"), code: http.StatusNotFound, body: "404 page not found"},
		{name: "no route, a middleware after", req: get("/nope"), code: http.StatusNotFound, body: "404 page not found", after: true},
		{name: "NoRoute handler", setup: func(r *gin.Engine) {
			r.NoRoute(func(c *gin.Context) { c.String(http.StatusNotFound, "custom 404") })
		}, req: get("/nope"), code: http.StatusNotFound, body: "custom 404"},
		{name: "no method", setup: func(r *gin.Engine) {
			r.HandleMethodNotAllowed = true
			r.POST("/only-post", func(c *gin.Context) {})
		}, req: get("/only-post"), code: http.StatusMethodNotAllowed, body: "405 method not allowed"},
	} {
		t.Run(row.name, func(t *testing.T) {
			g := conformance.MiniGroup(t, guard.Options{FreshFor: time.Hour, LoadTimeout: 2 * time.Second, WaitTimeout: time.Second})
			r := gin.New()
			r.Use(guardgin.Middleware(g, guardgin.Config{}))
			if row.after {
				r.Use(func(c *gin.Context) { c.Next() })
			}
			r.GET("/items/:id", func(c *gin.Context) { c.String(http.StatusOK, "item") })
			if row.setup != nil {
				row.setup(r)
			}
			for i := range 2 {
				rec := do(r, row.req.Clone(t.Context()))
				if rec.Code != row.code || rec.Body.String() != row.body || rec.Header().Get("Cache-Status") != "" {
					t.Errorf("request %d: %d %q [%s], want %d %q as without the middleware, no Cache-Status",
						i, rec.Code, rec.Body, rec.Header().Get("Cache-Status"), row.code, row.body)
				}
			}
		})
	}
}
