package httpcache

import (
	"fmt"
	"net/http"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// Engine serves the requests of one framework's middleware through a
// guard.Group, by the rules of the package documentation. C is the
// framework's request, which Config's Skipper and KeyFunc take. It is
// safe for concurrent use.
//
// A middleware built on it does, for each request, in its framework's
// idiom: Skip, then for an unsafe request Unsafe, else Serve.
type Engine[C any] struct {
	e       *engine
	skipper func(C) bool
	keyFunc func(C) string
}

// New returns the Engine of cfg on g, or an error naming the setting for a
// nil g or a Config out of range. Adapters panic with it, prefixed with
// their package's name: a programmer error, found when the middleware is
// built.
func New[C any](g *guard.Group, cfg Config[C]) (*Engine[C], error) {
	if err := cfg.check(g); err != nil {
		return nil, err
	}
	return &Engine[C]{e: newEngine(g, &cfg), skipper: cfg.Skipper, keyFunc: cfg.KeyFunc}, nil
}

// Skip reports whether Config.Skipper leaves c out: the middleware then
// passes it on untouched, and calls nothing else of the Engine for it.
func (e *Engine[C]) Skip(c C) bool { return e.skipper != nil && e.skipper(c) }

// Unsafe returns, for a request with an unsafe method, the func the
// middleware calls with its response's status and header fields just
// before the status line is sent (at the latest when the handler returns
// without an error): a non-error status invalidates, fleet-wide, what the
// request's target and its Location and Content-Location name (RFC 9111
// §4.4). It is safe to call more than once; only the first call acts.
// Unsafe returns nil for a safe method: serve the request with Serve.
// UnsafeWriter calls it for a net/http ResponseWriter.
func (e *Engine[C]) Unsafe(r *http.Request) func(status int, h http.Header) {
	return e.e.unsafe(r)
}

// Handler runs the handler of a request, writing to w, for r. It returns
// the handler's error, for frameworks whose handlers return one (echo),
// or record one (gin); a failed run is never shared.
type Handler func(w http.ResponseWriter, r *http.Request) error

// Serve answers the safe request r, which c is in the framework, on w: from
// the cache, from a handler run it shares with other requests, or, for a
// request that is not shared, from direct.
//
// direct runs the rest of the chain for r on w as it is; nil means h(w, r).
// h runs the handler on a detached copy of r and a writer that captures
// the response, possibly in another goroutine and after Serve returned
// (a background refresh), so it must use nothing of this request but its
// arguments: snapshot what it needs from c first (the framework's context
// goes back to its pool when the request ends).
//
// Serve returns the error of a handler run for this request, or a
// *StatusError when the engine decides the answer (503 while a failing
// URL's turn does not come, 504 when a run was abandoned...), which the
// middleware renders its framework's way. A handler panic is panicked
// again on this goroutine, with its value.
func (e *Engine[C]) Serve(c C, w http.ResponseWriter, r *http.Request, direct func() error, h Handler) error {
	key := ""
	if e.e.bypass(r) == "" {
		if e.keyFunc == nil {
			key = e.e.derived(r)
		} else if k := e.keyFunc(c); k != "" {
			key = userKeyPrefix + k
		}
	}
	if key == "" {
		w.Header().Set("Cache-Status", cachestatus.Bypass)
		return runDirect(direct, h, w, r)
	}
	return e.e.serve(w, r, key, direct, h, true)
}

// Key returns the key a GET or HEAD request r is stored under by the
// default rules (Config.KeyFunc is not called), or "" when r is never
// shared (credentials, a body...; see the package documentation). The
// scheme keyed is https when r.TLS is set. Every key of r's URL (its
// variants, its other spellings) holds one hash tag, which
// guard.Group.Inspect reports (KeyInfo.Tag) and InvalidateTag drops, as
// an unsafe request does. The stampede command uses it to inspect and
// invalidate a URL.
func (e *Engine[C]) Key(r *http.Request) string {
	if e.e.bypass(r) != "" {
		return ""
	}
	return e.e.derived(r)
}

// StatusError is returned by Serve when the engine, not the handler,
// decides the answer: the middleware renders Code its framework's way
// (the headers the answer needs, Cache-Status and Retry-After, are set).
type StatusError struct {
	Code int
	Err  error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("httpcache: %d %s: %v", e.Code, http.StatusText(e.Code), e.Err)
}

func (e *StatusError) Unwrap() error { return e.Err }
