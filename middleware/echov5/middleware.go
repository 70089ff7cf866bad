package guardecho

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync/atomic"

	"github.com/labstack/echo/v5"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
	"github.com/stampede-go/stampede/middleware/httpcache"
)

// Config configures MiddlewareWithConfig: the settings every stampede HTTP
// adapter shares, documented on [httpcache.Config], with Skipper first and
// KeyFunc taking the *echo.Context (an echo middleware.Skipper can be
// assigned to Skipper). The zero value is safe.
type Config = httpcache.Config[*echo.Context]

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
	return middlewareFor(eng)
}

// middlewareFor is the middleware of eng. Every one it returns is one
// closure, of one code pointer (cacheCode), by which afterCache finds it
// among an Echo's middleware. Not inlined: an inlined copy would be a
// closure of a code pointer of its own.
//
//go:noinline
func middlewareFor(eng *httpcache.Engine[*echo.Context]) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			r := c.Request()
			if r.Context().Value(detachedKey{}) == eng || eng.Skip(c) {
				return next(c)
			}
			if inv := eng.Unsafe(r); inv != nil {
				// RFC 9111 §4.4: invalidated before the status goes out.
				res, rerr := echo.UnwrapResponse(c.Response())
				if rerr != nil {
					// A writer of an earlier middleware that hides echo's:
					// one of ours sees the status as it goes out.
					uw := &httpcache.UnsafeWriter{ResponseWriter: c.Response(), Before: inv}
					c.SetResponse(uw)
					err := next(c)
					if c.Response() == uw {
						c.SetResponse(uw.ResponseWriter)
					}
					if err == nil {
						uw.Finish()
					}
					return err
				}
				res.Before(func() { inv(res.Status, res.Header()) })
				err := next(c)
				if err == nil && !res.Committed {
					inv(http.StatusOK, res.Header())
				}
				return err
			}
			if c.RouteInfo().Method == "" {
				// No route's handler: echo's 404 or 405 answers, as it
				// would without the cache (a HEAD on a GET-only route is
				// not served GET's entry).
				return next(c)
			}
			// A run may be detached from this request and outlive it,
			// while c goes back to echo's pool. Echo v5 keeps the route's
			// handler on the pooled context, out of reach of a context of
			// our own, so the run routes its request again and calls the
			// route's handler (with its route and group middleware, which
			// pass this middleware through: see detachedKey), in the
			// global middleware after this one (afterCache).
			if !storeKnown {
				c.Response().Header().Set("Cache-Status", cachestatus.Bypass+`; detail="echo context layout unknown"`)
				return next(c)
			}
			e, vals, logger := c.Echo(), values(c), c.Logger()
			// failed holds the values of a run whose handler returned an
			// error: the engine returns that error to this request only
			// when the run was this request's own, after it ended.
			var failed atomic.Pointer[map[string]any]
			run := func(w http.ResponseWriter, req *http.Request) error {
				req = req.WithContext(context.WithValue(req.Context(), detachedKey{}, eng))
				lc := e.NewContext(req, w)
				for k, v := range vals {
					lc.Set(k, v)
				}
				lc.SetLogger(logger)
				err := afterCache(e.Middlewares(), e.Router().Route(lc))(lc)
				if err != nil {
					left := values(lc)
					failed.Store(&left)
				}
				return err
			}
			err := eng.Serve(c, c.Response(), r, func() error { return next(c) }, run)
			if se := (*httpcache.StatusError)(nil); errors.As(err, &se) {
				return echo.NewHTTPError(se.Code, http.StatusText(se.Code)).Wrap(se.Err)
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

// cacheCode is the code pointer of this package's middleware (set by
// init: afterCache, which reads it, is part of that middleware).
var cacheCode uintptr

func init() { cacheCode = reflect.ValueOf(middlewareFor(nil)).Pointer() }

// afterCache wraps h, a route's handler with its route and group
// middleware, in the global middleware (e.Use) registered after the last
// of this package's: echo v5 runs the global middleware around what
// Router().Route returns, so a run calling that alone left them out (a
// security header, a locale, a Recover after the cache). Those before the
// cache ran for the request already; so did all of them when the cache is
// a group's or a route's middleware.
func afterCache(ms []echo.MiddlewareFunc, h echo.HandlerFunc) echo.HandlerFunc {
	start := len(ms)
	for i, m := range ms {
		if reflect.ValueOf(m).Pointer() == cacheCode {
			start = i + 1
		}
	}
	for i := len(ms) - 1; i >= start; i-- {
		h = ms[i](h)
	}
	return h
}

// detachedKey marks the request of a detached run with the engine that made
// it, so that this middleware, met again on the route (route or group
// middleware), calls the handler instead of serving the run's request
// through the cache a second time.
type detachedKey struct{}
