package httpcache

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Invalidation (RFC 9111 §4.4). A non-error response (2xx, 3xx) to an
// unsafe request (any method but GET, HEAD, OPTIONS and TRACE, unknown ones
// included) invalidates its target URI, and the URIs of its Location and
// Content-Location fields when they share its origin. Here the fleet is the
// cache: every key of the URL carries the URL's hash tag (key.go), so one
// guard.Group.InvalidateTag drops them all on every node, every variant
// (KeyHeaders, forwarding headers, Vary) included. It runs before the
// response's status line is sent: once a client has the unsafe request's
// response, no node serves the old one.

// safeMethods are RFC 9110 §9.2.1's safe methods; every other method,
// unknown ones included, invalidates.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace
}

// unsafe is Engine.Unsafe.
func (e *engine) unsafe(r *http.Request) func(status int, h http.Header) {
	if safeMethod(r.Method) {
		return nil
	}
	var once sync.Once
	return func(status int, h http.Header) {
		once.Do(func() {
			if status >= 200 && status < 400 {
				e.invalidate(r, h)
			}
		})
	}
}

// invalidate drops the cached responses of r's target and of the
// same-origin URIs in h's Location and Content-Location.
func (e *engine) invalidate(r *http.Request, h http.Header) {
	ctx := context.WithoutCancel(r.Context())
	targets := []*url.URL{r.URL}
	for _, name := range []string{"Location", "Content-Location"} {
		if v := h.Get(name); v != "" {
			if u, ok := e.sameOrigin(r, v); ok {
				targets = append(targets, u)
			}
		}
	}
	for _, u := range targets {
		if e.reqKey != nil {
			// A custom key: the key the func gives a GET of the URI.
			g := r.Clone(ctx)
			g.Method, g.URL, g.Body, g.ContentLength = http.MethodGet, u, http.NoBody, 0
			if k := e.reqKey(g); k != "" {
				_ = e.g.Invalidate(ctx, userKeyPrefix+k)
			}
			continue
		}
		_ = e.g.InvalidateTag(ctx, urlTag(r.TLS != nil, e.host(r), u))
	}
}

// sameOrigin resolves ref against r's URI and returns it as a request
// target when it has r's origin (scheme and host: RFC 9111 §4.4 does not
// invalidate for another origin, so one origin cannot clear another's).
// The host compares as URIs do (case-insensitively, the default port
// implied), with r's Host or, when set, Config.KeyHost: the name the
// site's own links use when a load balancer rewrites Host.
func (e *engine) sameOrigin(r *http.Request, ref string) (*url.URL, bool) {
	u, err := url.Parse(ref)
	if err != nil {
		return nil, false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := &url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	abs := base.ResolveReference(u)
	if !strings.EqualFold(abs.Scheme, scheme) {
		return nil, false
	}
	h := canonicalHost(scheme, abs.Host)
	if h != canonicalHost(scheme, r.Host) && (e.keyHost == "" || h != canonicalHost(scheme, e.keyHost)) {
		return nil, false
	}
	// As a request target in origin-form, the way a later GET arrives.
	return &url.URL{Path: abs.Path, RawPath: abs.RawPath, RawQuery: abs.RawQuery}, true
}

// UnsafeWriter calls its func with the response's status and fields
// before the status line goes out; Finish calls it for a handler that
// wrote nothing (an implicit 200). It is the net/http adapter's hook for
// Unsafe.
type UnsafeWriter struct {
	http.ResponseWriter
	Before func(status int, h http.Header)
	wrote  bool
}

func (w *UnsafeWriter) before(status int) {
	if !w.wrote {
		w.wrote = true
		w.Before(status, w.Header())
	}
}

func (w *UnsafeWriter) WriteHeader(code int) {
	if code >= 200 {
		w.before(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *UnsafeWriter) Write(p []byte) (int, error) {
	w.before(http.StatusOK)
	return w.ResponseWriter.Write(p)
}

// Flush sends what was written, and the status line first.
func (w *UnsafeWriter) Flush() {
	w.before(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over; the handler's own response on it is
// not seen.
func (w *UnsafeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.wrote = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *UnsafeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Finish acts for a handler that returned without writing.
func (w *UnsafeWriter) Finish() { w.before(http.StatusOK) }
