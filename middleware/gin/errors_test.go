package guardgin_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	guardgin "github.com/stampede-go/stampede/middleware/gin"
)

// renderErrors is gin's error-middleware idiom: registered before the
// cache, it renders the errors the handlers recorded, with a key they set.
func renderErrors(status int) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 {
			c.JSON(status, gin.H{"err": c.Errors.Last().Error(), "why": c.GetString("why")})
		}
	}
}

// TestHandlersAfterCacheRun: a handler registered between the middleware
// and the route's handler (a group's access check) runs for every request:
// the route is served past the cache, with a Cache-Status that says why.
// Before, a detached run called the route's handler alone, so the check
// never ran, not even for the request itself: a request without the key
// got the report.
func TestHandlersAfterCacheRun(t *testing.T) {
	r := gin.New()
	r.Use(guardgin.Middleware(newGroup(t), guardgin.Config{}))
	var checks, calls atomic.Int64
	admin := r.Group("/admin", func(c *gin.Context) {
		checks.Add(1)
		if c.GetHeader("X-Api-Key") != "secret" {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		c.Next()
	})
	admin.GET("/report", func(c *gin.Context) { calls.Add(1); c.String(http.StatusOK, "report") })
	keyed := get("/admin/report")
	keyed.Header.Set("X-Api-Key", "secret")
	for i, req := range []*http.Request{get("/admin/report"), keyed, get("/admin/report")} {
		rec := do(r, req)
		want := http.StatusUnauthorized
		if req == keyed {
			want = http.StatusOK
		}
		if rec.Code != want || checks.Load() != int64(i+1) {
			t.Fatalf("request %d: %d %q after %d checks, want %d after %d", i, rec.Code, rec.Body.String(), checks.Load(), want, i+1)
		}
		if cs := rec.Header().Get("Cache-Status"); !strings.Contains(cs, "handlers after the cache") {
			t.Errorf("request %d: Cache-Status %q, want a bypass that says why", i, cs)
		}
	}
	// Twice, on the engine and on a group: the group's serves, with one
	// Cache-Status.
	twice := gin.New()
	mw := guardgin.Middleware(newGroup(t), guardgin.Config{})
	twice.Use(mw)
	twice.Group("/", mw).GET("/t", func(c *gin.Context) { calls.Add(1); c.String(http.StatusOK, "t") })
	before := calls.Load()
	for i, want := range []string{"stampede; fwd=miss; stored", "stampede; hit"} {
		if got := do(twice, get("/t")).Header().Values("Cache-Status"); len(got) != 1 || got[0] != want {
			t.Errorf("twice, request %d: Cache-Status %q, want [%q]", i, got, want)
		}
	}
	if calls.Load()-before != 1 {
		t.Errorf("twice: %d handler calls for two requests, want 1", calls.Load()-before)
	}
	// On the route itself, last, it caches as before.
	r.GET("/items/:id", guardgin.Middleware(newGroup(t), guardgin.Config{}), func(c *gin.Context) { calls.Add(1); c.String(http.StatusOK, "item") })
	before = calls.Load()
	do(r, get("/items/1"))
	do(r, get("/items/1"))
	if calls.Load()-before != 1 {
		t.Errorf("route middleware: %d handler calls for two requests, want 1", calls.Load()-before)
	}
}

// TestStreamStopsWhenClientLeaves: c.Stream in a run that streams to its
// client ends when the client leaves, as it does without the middleware:
// the run's CloseNotify fires with its context. Before, it never fired,
// and a server-sent event loop ran on for nobody until its source ended.
func TestStreamStopsWhenClientLeaves(t *testing.T) {
	r := gin.New()
	r.Use(guardgin.Middleware(newGroup(t), guardgin.Config{}))
	read := make(chan struct{})
	gone := make(chan bool, 1)
	r.GET("/events", func(c *gin.Context) {
		c.Header("Content-Type", "text/event-stream") // not shared: streamed
		n := 0
		gone <- c.Stream(func(w io.Writer) bool {
			if n++; n == 2 {
				<-read // the client has the first event
			}
			c.SSEvent("message", n)
			return n < 1_000_000
		})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	srv.CloseClientConnections()
	close(read)
	select {
	case clientGone := <-gone:
		if !clientGone {
			t.Error("c.Stream ran its million steps: it never saw the client leave")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("c.Stream still running 30 s after the client left")
	}
}

// TestUnsafeErrorRenderedLaterKeepsEntry: an unsafe request whose handler
// records an error (c.Error) for a middleware before the cache to render
// invalidates its URL only if that answer's status is not an error, as it
// goes out. Before, the end of the chain read gin's default 200 and
// invalidated: any client could clear a URL with a failing POST.
func TestUnsafeErrorRenderedLaterKeepsEntry(t *testing.T) {
	for _, rendered := range []int{http.StatusInternalServerError, http.StatusAccepted} {
		r := gin.New()
		r.Use(renderErrors(rendered))
		r.Use(guardgin.Middleware(newGroup(t), guardgin.Config{}))
		var calls atomic.Int64
		r.GET("/items/:id", func(c *gin.Context) { calls.Add(1); c.String(http.StatusOK, "item") })
		r.POST("/items/:id", func(c *gin.Context) { _ = c.Error(errDB) })
		do(r, get("/items/1"))
		p := do(r, httptest.NewRequest(http.MethodPost, "/items/1", nil))
		do(r, get("/items/1"))
		want := int64(1) // kept
		if rendered < 400 {
			want = 2 // dropped before its 202 went out
		}
		if p.Code != rendered || calls.Load() != want {
			t.Errorf("POST rendered %d: GET handler calls %d, want %d", p.Code, calls.Load(), want)
		}
	}
}

// TestErrorMiddlewareSeesHandlerKeys: an error middleware before the cache
// reads the keys the handler set with its errors (c.Set), as without the
// middleware; before, they stayed on the run's copy of the context.
func TestErrorMiddlewareSeesHandlerKeys(t *testing.T) {
	build := func(cache bool) *gin.Engine {
		r := gin.New()
		r.Use(renderErrors(http.StatusUnauthorized))
		if cache {
			r.Use(guardgin.Middleware(newGroup(t), guardgin.Config{}))
		}
		r.GET("/items/:id", func(c *gin.Context) {
			c.Header("WWW-Authenticate", `Bearer realm="api"`)
			c.Set("why", "token expired")
			_ = c.Error(errDB)
		})
		return r
	}
	want, got := do(build(false), get("/items/1")), do(build(true), get("/items/1"))
	if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Www-Authenticate") != want.Header().Get("Www-Authenticate") {
		t.Errorf("with the middleware %d %q %v, without %d %q %v", got.Code, got.Body.String(), got.Header(), want.Code, want.Body.String(), want.Header())
	}
}
