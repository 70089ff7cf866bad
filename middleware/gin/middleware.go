package guardgin

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/internal/httpcache"
)

// Config configures Middleware. The zero value is safe.
type Config struct {
	// Skipper, when it returns true, lets the request go on down the chain
	// (c.Next) untouched. Default: never skip.
	Skipper func(c *gin.Context) bool

	// KeyHeaders are request headers whose values are part of the key. A
	// response whose Vary names a header not listed here is never shared.
	// Default: none.
	KeyHeaders []string

	// KeyFunc replaces the derived key. It is called for GET and HEAD
	// requests only, which share entries. Return "" to not share the
	// request. Default: the derived key (scheme, Host, path, sorted query,
	// KeyHeaders).
	KeyFunc func(c *gin.Context) string

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

// Middleware returns a gin middleware that serves GET responses through g.
// It panics on a nil g or a Config out of range (see the package documentation).
func Middleware(g *guard.Group, cfg Config) gin.HandlerFunc {
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
		panic("guardgin: " + err.Error())
	}
	return func(c *gin.Context) {
		if cfg.Skipper != nil && cfg.Skipper(c) {
			c.Next()
			return
		}
		r := c.Request
		if inv := eng.Unsafe(r); inv != nil {
			// RFC 9111 §4.4: invalidated before the status goes out.
			uw := &unsafeWriter{ResponseWriter: c.Writer, before: inv}
			c.Writer = uw
			c.Next()
			c.Writer = uw.ResponseWriter
			uw.header()
			return
		}
		// A run may outlive this request, and c goes back to gin's pool
		// when the request ends: the run gets a copy, taken now (for the
		// methods that may share: the others never run detached).
		var run httpcache.Handler
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			cp, handler := c.Copy(), c.Handler()
			run = func(w http.ResponseWriter, req *http.Request) error {
				return runDetached(cp, handler, w, req)
			}
		}
		direct := func() error {
			c.Next() // its errors are in c.Errors already
			return nil
		}
		var err error
		if cfg.KeyFunc != nil {
			k := ""
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				k = cfg.KeyFunc(c)
			}
			err = eng.ServeKey(c.Writer, r, k, direct, run)
		} else {
			err = eng.Serve(c.Writer, r, direct, run)
		}
		var se *httpcache.StatusError
		var re runErrors
		switch {
		case errors.As(err, &se):
			_ = c.AbortWithError(se.Code, se)
		case errors.As(err, &re):
			// This request's own handler run recorded errors; its
			// response was written to c.Writer.
			c.Errors = append(c.Errors, re...)
			c.Abort()
		case err != nil:
			_ = c.Error(err)
			c.Abort()
		default:
			// Answered (from the cache, or by c.Next, which ran the
			// rest of the chain already).
			c.Abort()
		}
	}
}

// runErrors are the errors a detached run's handler recorded with c.Error:
// the engine never caches a response that comes with an error.
type runErrors []*gin.Error

func (re runErrors) Error() string {
	msgs := make([]string, len(re))
	for i, e := range re {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// runDetached calls handler on a copy of cp that writes to w and reads req,
// and returns the errors the handler recorded with c.Error.
func runDetached(cp *gin.Context, handler gin.HandlerFunc, w http.ResponseWriter, req *http.Request) error {
	lc := cp.Copy()
	lc.Request = req
	dw := newWriter(w)
	lc.Writer = dw
	handler(lc)
	dw.WriteHeaderNow() // c.Status(204) and no body: gin writes it after the chain
	if len(lc.Errors) == 0 {
		return nil
	}
	return runErrors(lc.Errors)
}
