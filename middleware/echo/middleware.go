package guardecho

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/cachestatus"
	"github.com/stampede-go/stampede/middleware/internal/httpcache"
)

// Config configures MiddlewareWithConfig. The zero value is safe.
type Config struct {
	// Skipper defines a function to skip the middleware: the handler runs
	// directly. It has the type of echo's middleware.Skipper, so one can be
	// assigned. Default: never skip.
	Skipper func(c echo.Context) bool

	// KeyHeaders are request headers whose values are part of the key. A
	// response whose Vary names a header not listed here is never shared.
	// Default: none.
	KeyHeaders []string

	// KeyFunc replaces the derived key. It is called for GET and HEAD
	// requests only, which share entries. Return "" to not share the
	// request. Default: the derived key (scheme, Host, path, sorted query,
	// KeyHeaders).
	KeyFunc func(c echo.Context) string

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
	// client can send them itself, and Context.Scheme and applications'
	// links read them; a proxy that sets them alike on every request costs
	// no hit. Set it only when every request comes through a proxy that
	// removes or overwrites each of them, or when the application reads
	// none of them. Default: false.
	UnkeyedForwarding bool

	// PassFor is how long a URL whose response could not be shared is
	// marked pass, fleet-wide: its requests run the handler at once, each
	// for itself, until one response can be shared again. A negative value
	// marks nothing: the requests waiting take turns instead. Default: 5s.
	PassFor time.Duration

	// NotStored, if set, is called with the request and why when a
	// complete response that is not a failure is not stored (a cookie,
	// private, too large, a header field the store could not read back
	// exactly...). It must be quick and must not block. Default: none.
	NotStored func(r *http.Request, why string)

	// TargetedCacheControl lists the targeted cache-control fields (RFC
	// 9213) that rule this cache, over Cache-Control and Expires: the
	// first one present with a valid value decides, and none of them is
	// forwarded to clients. Default: CDN-Cache-Control with
	// UpstreamWindows, none without. An empty, non-nil list turns them off.
	TargetedCacheControl []string

	// HeuristicFreshness lets UpstreamWindows store a response that states
	// no freshness but has a Last-Modified, for a tenth of the time since
	// then, at most a day (RFC 9111 §4.2.2), if its status is
	// heuristically cacheable. Never with RequireFreshness. Default: false.
	HeuristicFreshness bool

	// StoreSetCookie stores and shares responses that carry Set-Cookie,
	// the cookie with them: every client then gets the cookie first set
	// for another. RFC 9111 allows it; turn it on only for cookies that
	// are the same for everyone (a consent banner's, say). Default: false
	// (such a response is never shared).
	StoreSetCookie bool

	// KeyHost, when set, is keyed instead of each request's Host. The key
	// holds the Host as sent, so a load balancer that rewrites Host to each
	// backend's address, or local processes on different ports, split one
	// URL into one entry (and one origin call) per backend: set KeyHost to
	// the site's name there. Set it only when every request through this
	// middleware is for one site. Default: the Host as sent.
	KeyHost string
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
		cfg.Skipper = func(echo.Context) bool { return false }
	}
	o := httpcache.Options{
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
	}
	eng, err := httpcache.New(g, o)
	if err != nil {
		panic("guardecho: " + err.Error())
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if cfg.Skipper(c) {
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
			// Snapshot what a detached run needs: c goes back to echo's
			// pool when this request ends, possibly before the run.
			vals, ok := values(c)
			if !ok {
				c.Response().Header().Set("Cache-Status", cachestatus.Bypass+`; detail="echo context not readable"`)
				return next(c)
			}
			e, path, logger := c.Echo(), c.Path(), c.Logger()
			names, pvalues := slices.Clone(c.ParamNames()), slices.Clone(c.ParamValues())
			run := func(w http.ResponseWriter, req *http.Request) error {
				lc := e.NewContext(req, w)
				lc.SetPath(path)
				lc.SetParamNames(names...)
				lc.SetParamValues(pvalues...)
				for k, v := range vals {
					lc.Set(k, v)
				}
				lc.SetLogger(logger)
				return next(lc)
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
				return echo.NewHTTPError(se.Code).SetInternal(se.Err)
			}
			return err
		}
	}
}
