package guardecho_test

import (
	"maps"
	"net/http"
	"slices"
	"testing"

	"github.com/labstack/echo/v4"

	guardecho "github.com/stampede-go/stampede/middleware/echo"
)

// errorRows are handlers that set fields for the error they return, as
// echo's own middleware do (BasicAuth: WWW-Authenticate, then
// ErrUnauthorized), and what they set.
var errorRows = []struct {
	name   string
	err    error
	fields http.Header
}{
	{"401 challenge", echo.ErrUnauthorized, http.Header{"Www-Authenticate": {`basic realm="Restricted"`}}},
	{"429 retry", echo.ErrTooManyRequests, http.Header{"Retry-After": {"30"}}},
	{"405 allow", echo.ErrMethodNotAllowed, http.Header{"Allow": {"GET, HEAD"}}},
	{"503 two fields", echo.NewHTTPError(http.StatusServiceUnavailable), http.Header{"Retry-After": {"5"}, "X-Reason": {"maintenance", "db"}}},
}

// TestErrorKeepsHandlerFields: the fields a handler sets before it returns
// an error reach the response echo's HTTPErrorHandler renders, as without
// the middleware. Before, the run's fields stayed in the engine's capture:
// a 401 went out without its WWW-Authenticate, so browsers never asked
// for credentials behind a cached group.
func TestErrorKeepsHandlerFields(t *testing.T) {
	for _, row := range errorRows {
		t.Run(row.name, func(t *testing.T) {
			h := func(c echo.Context) error {
				for k, v := range row.fields {
					for _, x := range v {
						c.Response().Header().Add(k, x)
					}
				}
				return row.err
			}
			plain := echo.New()
			plain.GET("/items/:id", h)
			cached := echo.New()
			cached.Use(guardecho.Middleware(newGroup(t)))
			cached.GET("/items/:id", h)
			want, got := do(plain, get("/items/1")), do(cached, get("/items/1"))
			gh := got.Header().Clone()
			gh.Del("Cache-Status")
			if got.Code != want.Code || !maps.EqualFunc(gh, want.Header(), slices.Equal) {
				t.Errorf("with the middleware %d %v, without %d %v", got.Code, gh, want.Code, want.Header())
			}
		})
	}
}

// TestErrorHandlerSeesHandlerValues: a custom HTTPErrorHandler reads, on
// the request's context, the values the handler set before it returned
// its error (c.Set), as without the middleware; before, they stayed on
// the run's own context.
func TestErrorHandlerSeesHandlerValues(t *testing.T) {
	h := func(c echo.Context) error {
		c.Set("why", "item 1 is archived")
		return echo.ErrNotFound
	}
	eh := func(err error, c echo.Context) {
		why, _ := c.Get("why").(string)
		_ = c.String(http.StatusNotFound, "not found: "+why)
	}
	plain := echo.New()
	plain.HTTPErrorHandler = eh
	plain.GET("/items/:id", h)
	cached := echo.New()
	cached.HTTPErrorHandler = eh
	cached.Use(guardecho.Middleware(newGroup(t)))
	cached.GET("/items/:id", h)
	if want, got := do(plain, get("/items/1")).Body.String(), do(cached, get("/items/1")).Body.String(); got != want {
		t.Errorf("with the middleware %q, without %q", got, want)
	}
}

// TestNoRouteNotServedFromCache: a request no route's handler answers
// (echo's 404 and 405) gets echo's answer, as without the middleware,
// whatever is cached for its URL. Before, a HEAD on a GET-only route got
// 405 until a GET filled the URL's entry, then 200 from it.
func TestNoRouteNotServedFromCache(t *testing.T) {
	e, calls := app(t, guardecho.Config{}, func(c echo.Context) error { return c.String(http.StatusOK, "item") })
	head := func() int {
		r := get("/items/1")
		r.Method = http.MethodHead
		return do(e, r).Code
	}
	before := head()
	if rec := do(e, get("/items/1")); rec.Code != http.StatusOK || calls.Load() != 1 {
		t.Fatalf("GET: %d after %d calls", rec.Code, calls.Load())
	}
	if after := head(); before != http.StatusMethodNotAllowed || after != before {
		t.Errorf("HEAD on a GET-only route: %d before the GET, %d after; echo answers 405", before, after)
	}
}
