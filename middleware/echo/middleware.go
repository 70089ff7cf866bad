package guardecho

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
	"github.com/stampede-go/stampede/middleware/httpcache"
)

// Config configures MiddlewareWithConfig: the settings every stampede HTTP
// adapter shares, documented on [httpcache.Config], with Skipper first and
// KeyFunc taking the echo.Context (an echo middleware.Skipper can be
// assigned to Skipper). The zero value is safe.
type Config = httpcache.Config[echo.Context]

// Middleware returns MiddlewareWithConfig(g, Config{}).
func Middleware(g *guard.Group) echo.MiddlewareFunc {
	return MiddlewareWithConfig(g, Config{})
}

// MiddlewareWithConfig returns a middleware that serves GET responses
// through g. It panics on a nil g or a Config out of range (see the
// package documentation).
func MiddlewareWithConfig(g *guard.Group, cfg Config) echo.MiddlewareFunc {
	eng, err := httpcache.New(g, cfg)
	if err != nil {
		panic("guardecho: " + err.Error())
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if eng.Skip(c) {
				return next(c)
			}
			r := c.Request()
			if inv := eng.Unsafe(r); inv != nil {
				// RFC 9111 §4.4: invalidated before the status goes out.
				res := c.Response()
				res.Before(func() { inv(res.Status, res.Header()) })
				err := next(c)
				if err == nil && !res.Committed {
					inv(http.StatusOK, res.Header())
				}
				return err
			}
			if noRoute(c) {
				// No route's handler: echo's 404 or 405 answers, as it
				// would without the cache (a HEAD on a GET-only route is
				// not served GET's entry).
				return next(c)
			}
			// Snapshot what a detached run needs: c goes back to echo's
			// pool when this request ends, possibly before the run.
			vals, ok := values(c)
			if !ok {
				c.Response().Header().Set("Cache-Status", cachestatus.Bypass+`; detail="echo context not readable"`)
				return next(c)
			}
			e, path, logger := c.Echo(), c.Path(), c.Logger()
			names, pvalues := slices.Clone(c.ParamNames()), slices.Clone(c.ParamValues())
			// failed holds the values of a run whose handler returned an
			// error: the engine returns that error to this request only
			// when the run was this request's own, after it ended.
			var failed atomic.Pointer[map[string]any]
			run := func(w http.ResponseWriter, req *http.Request) error {
				lc := e.NewContext(req, w)
				lc.SetPath(path)
				lc.SetParamNames(names...)
				lc.SetParamValues(pvalues...)
				for k, v := range vals {
					lc.Set(k, v)
				}
				lc.SetLogger(logger)
				err := next(lc)
				if err != nil {
					if left, ok := values(lc); ok {
						failed.Store(&left)
					}
				}
				return err
			}
			err := eng.Serve(c, c.Response(), r, func() error { return next(c) }, run)
			if se := (*httpcache.StatusError)(nil); errors.As(err, &se) {
				return echo.NewHTTPError(se.Code).SetInternal(se.Err)
			}
			if left := failed.Load(); err != nil && left != nil {
				// The handler's own run failed: echo's HTTPErrorHandler
				// (and the middleware before this one) read its error on
				// c, with what the handler set for them (c.Set).
				for k, v := range *left {
					c.Set(k, v)
				}
			}
			return err
		}
	}
}

// echo's handlers of a request no route matched, by code pointer.
var (
	notFoundCode         = reflect.ValueOf(echo.NotFoundHandler).Pointer()
	methodNotAllowedCode = reflect.ValueOf(echo.MethodNotAllowedHandler).Pointer()
)

// noRoute reports whether echo's router matched no route for c's request:
// its handler is echo's 404 or 405.
func noRoute(c echo.Context) bool {
	h := c.Handler()
	if h == nil {
		return false
	}
	p := reflect.ValueOf(h).Pointer()
	return p == notFoundCode || p == methodNotAllowedCode
}
