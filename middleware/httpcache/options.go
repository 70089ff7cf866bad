package httpcache

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// Config configures the middleware of every stampede HTTP adapter: each
// adapter's Config is this type, with C its framework's request
// (guardhttp.Config is Config[*http.Request]; guardecho's is
// Config[echo.Context] on echo v4 and Config[*echo.Context] on v5;
// guardgin's is Config[*gin.Context]). The zero value is safe: see the
// package documentation for what is never shared.
type Config[C any] struct {
	// Skipper, when it returns true, passes the request on untouched: to
	// the handler (net/http), to the next handler (echo), down the chain
	// (gin, c.Next). No key is derived, no Cache-Status is set, nothing is
	// stored, served from the cache or invalidated (an unsafe request it
	// skips invalidates nothing). Leave out what each instance answers for
	// itself or must never be shared: /metrics, health and readiness
	// probes, debug endpoints. It is called for every request, so it must
	// be quick. An echo middleware.Skipper can be assigned to it.
	// Default: nothing is skipped.
	Skipper func(c C) bool

	// KeyFunc replaces the derived key. It is called only for GET and HEAD
	// requests the middleware may share, which share entries, so the
	// method need not be part of the key. Return "" to not share the
	// request (Cache-Status: bypass). With net/http an unsafe request
	// drops the key KeyFunc gives a GET of each URI it invalidates; an
	// echo or gin KeyFunc cannot be called without a request of its
	// framework, so there an unsafe request drops no entry of KeyFunc's,
	// and they last their windows (or guard.Group.Invalidate). Default:
	// the derived key (see the package documentation).
	KeyFunc func(c C) string

	// KeyHeaders are request headers whose values are part of the key
	// (Accept-Encoding, Accept-Language...), besides the forwarding
	// headers, which are keyed unless UnkeyedForwarding. A response whose
	// Vary names a request header the key does not hold is stored per
	// value of that header, a variant (two round trips per hit instead of
	// one): list such a header here to key it instead. Default: none.
	KeyHeaders []string

	// MaxBodyBytes is the largest body stored; a larger response is
	// streamed to its client, not stored, and buffered no further than
	// this. Keep it below the guard's MaxValueBytes. Default: 1 MiB.
	MaxBodyBytes int

	// Statuses are the response statuses shared. 206 and 5xx are never
	// shared by their status. Default: 200, 203, 204, 300, 301, 308, 404,
	// 405, 410, 414.
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
	// ([ForwardingHeaders]: X-Forwarded-Host, X-Forwarded-Proto, Forwarded,
	// X-Original-URL...) out of the key. By default they are keyed,
	// because a client can send them itself and applications (and echo's
	// and gin's scheme and host helpers) build links and routes from them;
	// a proxy that sets them alike on every request costs no hit. Set it
	// only when every request reaches the handler through a proxy that
	// removes or overwrites each of them, or when the application reads
	// none of them (a response that names one in Vary is then not stored).
	// See docs/security.md. Default: false.
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
	// forwarded to clients but CDN-Cache-Control. Default:
	// CDN-Cache-Control with UpstreamWindows, none without. An empty,
	// non-nil list turns them off.
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
	// name there. Set it only when every request through the middleware is
	// for one site. Default: the Host as sent.
	KeyHost string
}

// The defaults of Config's fields.
const (
	defaultPassFor      = 5 * time.Second
	defaultMaxBodyBytes = 1 << 20
)

// defaultStatuses are RFC 9110's heuristically cacheable statuses, without
// 206 and 501.
var defaultStatuses = []int{200, 203, 204, 300, 301, 308, 404, 405, 410, 414}

// check reports the first setting of c that cannot work with g. Each
// adapter panics with it, under its own name: a programmer error, found
// when the middleware is built.
func (c *Config[C]) check(g *guard.Group) error {
	if g == nil {
		return errors.New("nil *guard.Group")
	}
	switch max := g.Options().MaxValueBytes; {
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("negative MaxBodyBytes %d", c.MaxBodyBytes)
	case c.MaxBodyBytes > max:
		return fmt.Errorf("MaxBodyBytes %d is above the Group's MaxValueBytes %d: such a body could never be stored", c.MaxBodyBytes, max)
	}
	for _, s := range c.Statuses {
		if !statusShareable(s) {
			return fmt.Errorf("the Statuses setting holds %d: a 1xx, 206, 304 or 5xx is never shared by its status (a 5xx the origin marks fresh is, with UpstreamWindows)", s)
		}
	}
	for _, list := range []struct {
		name  string
		names []string
	}{{"KeyHeaders", c.KeyHeaders}, {"TargetedCacheControl", c.TargetedCacheControl}} {
		for _, n := range list.names {
			if !validName([]byte(strings.TrimSpace(n))) {
				return fmt.Errorf("%s holds %q, not a header field name", list.name, n)
			}
		}
	}
	if strings.ContainsFunc(c.KeyHost, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("KeyHost %q holds a space or a control character", c.KeyHost)
	}
	return nil
}

// statusShareable reports a status Config.Statuses may hold. A 304
// answers a conditional request: it is never a stored response
// (revalidation merges it into one).
func statusShareable(s int) bool {
	return s >= 200 && s < 500 && s != http.StatusPartialContent && s != http.StatusNotModified
}
