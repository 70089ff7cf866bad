package guardecho

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
	"github.com/stampede-go/stampede/middleware/internal/httpcache"
)

// Config configures MiddlewareWithConfig. The zero value is safe.
type Config struct {
	// Skipper defines a function to skip the middleware: the handler runs
	// directly. It has the type of echo's middleware.Skipper, so one can be
	// assigned. Default: never skip.
	Skipper func(c *echo.Context) bool

	// KeyHeaders are request headers whose values are part of the key. A
	// response whose Vary names a header not listed here is never shared.
	// Default: none.
	KeyHeaders []string

	// KeyFunc replaces the derived key. It is called for GET and HEAD
	// requests only, which share entries. Return "" to not share the
	// request. Default: the derived key (scheme, Host, path, sorted query,
	// KeyHeaders).
	KeyFunc func(c *echo.Context) string

	// MaxBodyBytes is the largest body stored; a larger response is
	// streamed to its client, not stored. Default: 1 MiB.
	MaxBodyBytes int

	// Statuses are the response statuses shared. 206 and 5xx are never
	// shared. Default: 200, 203, 204, 300, 301, 308, 404, 405, 410, 414.
	Statuses []int

	// HonorClientNoCache lets a client's Cache-Control: no-cache skip the
	// cache. Default: false (any client could stampede the origin).
	HonorClientNoCache bool

	// UpstreamWindows lets the handler's Cache-Control max-age, s-maxage,
	// stale-while-revalidate and stale-if-error set the guard's windows per
	// key. Default: false.
	UpstreamWindows bool

	// RequireFreshness stores only responses that state their freshness
	// (Cache-Control s-maxage or max-age, or Expires against Date), for
	// exactly as long as they state. With UpstreamWindows and
	// HonorClientNoCache it makes the middleware an RFC 9111 shared cache.
	// Default: false (a response without freshness information is stored
	// for the Group's windows).
	RequireFreshness bool

	// UnkeyedForwarding leaves the forwarding and override headers
	// (ForwardingHeaders: X-Forwarded-Host, X-Forwarded-Proto, Forwarded,
	// X-Original-URL...) out of the key. By default they are keyed: a
	// client can send them itself, and the framework's scheme and host
	// helpers and applications' links read them; a proxy that sets them
	// alike on every request costs no hit. Set it only when every request
	// comes through a proxy that removes or overwrites each of them, or when
	// the application reads none of them. Default: false.
	UnkeyedForwarding bool

	// PassFor, NotStored, TargetedCacheControl, HeuristicFreshness,
	// StoreSetCookie and KeyHost work as guardhttp.Config's fields of the
	// same names (package github.com/stampede-go/stampede/middleware/nethttp):
	// the hit-for-pass window (default 5s), a hook for responses not
	// stored, the targeted cache-control fields that rule this cache, RFC
	// 9111 heuristic freshness, sharing responses with Set-Cookie (off),
	// and a fixed host to key instead of each request's.
	PassFor              time.Duration
	NotStored            func(r *http.Request, why string)
	TargetedCacheControl []string
	HeuristicFreshness   bool
	StoreSetCookie       bool
	KeyHost              string
}

// ForwardingHeaders returns the request headers keyed by default, unless
// Config.UnkeyedForwarding.
func ForwardingHeaders() []string { return httpcache.ForwardingHeaders() }

// Middleware returns MiddlewareWithConfig(g, Config{}).
func Middleware(g *guard.Group) echo.MiddlewareFunc {
	return MiddlewareWithConfig(g, Config{})
}

// MiddlewareWithConfig returns a middleware that serves GET responses
// through g. It panics on a nil g or a Config out of range (see the package documentation).
func MiddlewareWithConfig(g *guard.Group, cfg Config) echo.MiddlewareFunc {
	if cfg.Skipper == nil {
		cfg.Skipper = func(*echo.Context) bool { return false }
	}
	eng, err := httpcache.New(g, httpcache.Options{
		KeyHeaders:           cfg.KeyHeaders,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		Statuses:             cfg.Statuses,
		HonorClientNoCache:   cfg.HonorClientNoCache,
		UpstreamWindows:      cfg.UpstreamWindows,
		RequireFreshness:     cfg.RequireFreshness,
		UnkeyedForwarding:    cfg.UnkeyedForwarding,
		PassFor:              cfg.PassFor,
		NotStored:            cfg.NotStored,
		TargetedCacheControl: cfg.TargetedCacheControl,
		HeuristicFreshness:   cfg.HeuristicFreshness,
		StoreSetCookie:       cfg.StoreSetCookie,
		KeyHost:              cfg.KeyHost,
	})
	if err != nil {
		panic("guardecho: " + err.Error())
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			r := c.Request()
			if r.Context().Value(detachedKey{}) == eng || cfg.Skipper(c) {
				return next(c)
			}
			if inv := eng.Unsafe(r); inv != nil {
				// RFC 9111 §4.4: invalidated before the status goes out.
				res, rerr := echo.UnwrapResponse(c.Response())
				if rerr != nil {
					err := next(c)
					if err == nil {
						inv(http.StatusOK, c.Response().Header())
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
			// A run may be detached from this request and outlive it,
			// while c goes back to echo's pool. Echo v5 keeps the route's
			// handler on the pooled context, out of reach of a context of
			// our own, so the run routes its request again and calls the
			// route's handler (with its route and group middleware, which
			// pass this middleware through: see detachedKey).
			if !storeKnown {
				c.Response().Header().Set("Cache-Status", cachestatus.Bypass+`; detail="echo context layout unknown"`)
				return next(c)
			}
			e, vals, logger := c.Echo(), values(c), c.Logger()
			run := func(w http.ResponseWriter, req *http.Request) error {
				req = req.WithContext(context.WithValue(req.Context(), detachedKey{}, eng))
				lc := e.NewContext(req, w)
				for k, v := range vals {
					lc.Set(k, v)
				}
				lc.SetLogger(logger)
				return e.Router().Route(lc)(lc)
			}
			direct := func() error { return next(c) }
			var err error
			if cfg.KeyFunc != nil {
				k := ""
				if r.Method == http.MethodGet || r.Method == http.MethodHead {
					k = cfg.KeyFunc(c)
				}
				err = eng.ServeKey(c.Response(), r, k, direct, run)
			} else {
				err = eng.Serve(c.Response(), r, direct, run)
			}
			var se *httpcache.StatusError
			if errors.As(err, &se) {
				return echo.NewHTTPError(se.Code, http.StatusText(se.Code)).Wrap(se.Err)
			}
			return err
		}
	}
}

// detachedKey marks the request of a detached run with the engine that made
// it, so that this middleware, met again on the route (route or group
// middleware), calls the handler instead of serving the run's request
// through the cache a second time.
type detachedKey struct{}
