package guardhttp

import (
	"errors"
	"net/http"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/internal/httpcache"
)

// Config configures Middleware. The zero value is safe: see the package
// documentation for what is never shared.
type Config struct {
	// Skipper, when it returns true, passes the request to the handler
	// untouched: no key is derived, no Cache-Status is set, nothing is
	// stored, served from the cache or invalidated (an unsafe request it
	// skips invalidates nothing). Leave out what is per instance or must
	// never be shared: /metrics, health and readiness probes, debug
	// endpoints. It is called for every request, so it must be quick.
	// echo's and gin's Config have the same field, on their context.
	// Default: nothing is skipped.
	Skipper func(r *http.Request) bool

	// KeyHeaders are request headers whose values are part of the key
	// (Accept-Encoding, Accept-Language...), besides the forwarding
	// headers, which are keyed unless UnkeyedForwarding. A response
	// whose Vary names a header not listed here is never shared.
	// Default: none.
	KeyHeaders []string

	// KeyFunc replaces the derived key. It is called for GET and HEAD
	// requests only, which share entries, so the method need not be part
	// of the key. Return "" to not share the request. Default: the derived
	// key (see the package documentation).
	KeyFunc func(*http.Request) string

	// MaxBodyBytes is the largest body stored; a larger response is
	// streamed to its client, not stored, and buffered no further than
	// this. Keep it below the guard's MaxValueBytes. Default: 1 MiB.
	MaxBodyBytes int

	// Statuses are the response statuses shared. 206 and 5xx are never
	// shared. Default: 200, 203, 204, 300, 301, 308, 404, 405, 410, 414.
	Statuses []int

	// HonorClientNoCache lets a client's Cache-Control: no-cache or
	// no-store (or Pragma: no-cache) skip the cache and run the handler.
	// Default: false, since any client could then stampede the origin.
	HonorClientNoCache bool

	// UpstreamWindows lets the handler's Cache-Control max-age, s-maxage,
	// stale-while-revalidate and stale-if-error set the guard's fresh and
	// stale windows per key. Default: false (the guard's windows apply).
	UpstreamWindows bool

	// RequireFreshness stores only responses that state their freshness
	// (Cache-Control s-maxage or max-age, or Expires against Date), for
	// exactly as long as they state. With UpstreamWindows and
	// HonorClientNoCache it makes the middleware an RFC 9111 shared cache.
	// Default: false (a response without freshness information is stored
	// for the Group's windows).
	RequireFreshness bool

	// UnkeyedForwarding leaves the forwarding and override headers
	// (ForwardingHeaders: X-Forwarded-Host, Forwarded, X-Original-URL...)
	// out of the key. By default they are keyed, because a client can send
	// them itself and applications build links and routes from them; a
	// proxy that sets them alike on every request costs no hit. Set it only
	// when every request reaches the handler through a proxy that removes
	// or overwrites each of them, or when the application reads none of
	// them (a response that names one in Vary is then not stored). See
	// docs/security.md. Default: false.
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
	// URL into one entry (and one origin call) per backend, and an unsafe
	// request through one backend invalidates that backend's entry only:
	// the others go on serving the old response. Set KeyHost to the site's
	// name there. Set it only when every request through this middleware
	// is for one site. Default: the Host as sent.
	KeyHost string
}

// ForwardingHeaders returns the request headers keyed by default, unless
// Config.UnkeyedForwarding: the headers through which a proxy (or a client
// posing as one) names the host, scheme, port, prefix or URL asked for.
func ForwardingHeaders() []string { return httpcache.ForwardingHeaders() }

func (c Config) options() httpcache.Options {
	return httpcache.Options{
		KeyHeaders:           c.KeyHeaders,
		KeyFunc:              c.KeyFunc,
		MaxBodyBytes:         c.MaxBodyBytes,
		Statuses:             c.Statuses,
		HonorClientNoCache:   c.HonorClientNoCache,
		UpstreamWindows:      c.UpstreamWindows,
		RequireFreshness:     c.RequireFreshness,
		UnkeyedForwarding:    c.UnkeyedForwarding,
		PassFor:              c.PassFor,
		NotStored:            c.NotStored,
		TargetedCacheControl: c.TargetedCacheControl,
		HeuristicFreshness:   c.HeuristicFreshness,
		StoreSetCookie:       c.StoreSetCookie,
		KeyHost:              c.KeyHost,
	}
}

// Middleware returns a middleware that serves GET responses of the handler
// it wraps through g. It panics on a nil g or a Config out of range (see the package documentation).
func Middleware(g *guard.Group, cfg Config) func(http.Handler) http.Handler {
	eng, err := httpcache.New(g, cfg.options())
	if err != nil {
		panic("guardhttp: " + err.Error())
	}
	return func(next http.Handler) http.Handler {
		run := func(w http.ResponseWriter, r *http.Request) error {
			next.ServeHTTP(w, r)
			return nil
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if cfg.Skipper != nil && cfg.Skipper(r) {
				next.ServeHTTP(w, r)
				return
			}
			if inv := eng.Unsafe(r); inv != nil {
				// RFC 9111 §4.4: invalidated before the status goes out.
				uw := &httpcache.UnsafeWriter{ResponseWriter: w, Before: inv}
				_ = eng.Serve(uw, r, nil, run)
				uw.Finish()
				return
			}
			err := eng.Serve(w, r, nil, run)
			if err == nil {
				return
			}
			if se := (*httpcache.StatusError)(nil); errors.As(err, &se) {
				http.Error(w, http.StatusText(se.Code), se.Code)
			}
		})
	}
}
