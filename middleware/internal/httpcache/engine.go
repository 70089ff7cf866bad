package httpcache

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// Options configure an Engine; the framework packages document each field
// on their own Config.
type Options struct {
	KeyHeaders         []string
	KeyFunc            func(*http.Request) string
	MaxBodyBytes       int
	Statuses           []int
	HonorClientNoCache bool
	UpstreamWindows    bool
	RequireFreshness   bool
	UnkeyedForwarding  bool
	// PassFor is how long a URL whose response was not shareable is
	// marked pass (hit-for-pass): its requests run their own handler at
	// once, with no flight to wait for, until one response is stored.
	// 0 means DefaultPassFor; a negative value marks nothing (requests
	// that were waiting then take turns at the handler).
	PassFor time.Duration
	// NotStored, if set, is called when a response that was complete and
	// not a failure is not stored, with why.
	NotStored func(r *http.Request, why string)
	// TargetedCacheControl lists the targeted fields (RFC 9213) that rule
	// this cache, first present first: nil means CDN-Cache-Control with
	// UpstreamWindows and none without; an empty list, none.
	TargetedCacheControl []string
	// HeuristicFreshness lets UpstreamWindows give a response without
	// explicit freshness a tenth of the time since its Last-Modified, at
	// most a day (RFC 9111 §4.2.2); never with RequireFreshness.
	HeuristicFreshness bool
	// StoreSetCookie stores and shares responses that carry Set-Cookie,
	// the cookie with them.
	StoreSetCookie bool
	// KeyHost, when set, is keyed instead of each request's Host.
	KeyHost string
}

// DefaultPassFor is how long a URL is marked pass by default.
const DefaultPassFor = 5 * time.Second

// DefaultMaxBodyBytes is the largest body stored by default.
const DefaultMaxBodyBytes = 1 << 20

// DefaultStatuses are the statuses shared by default: RFC 9110's
// heuristically cacheable ones, without 206 and 501.
var DefaultStatuses = []int{200, 203, 204, 300, 301, 308, 404, 405, 410, 414}

// Engine serves requests through a guard.Group. It is safe for concurrent
// use.
type Engine struct {
	g            *guard.Group
	keyHeaders   []string
	keyFunc      func(*http.Request) string
	maxBody      int
	statuses     [600]bool
	honorClient  bool
	forwarding   bool // forwarding headers are keyed
	upstream     bool // the response's Cache-Control sets its windows
	strict       bool // only responses with explicit freshness are stored
	passFor      time.Duration
	notStored    func(*http.Request, string)
	targets      []string // targeted Cache-Control fields, canonical
	heuristic    bool
	storeCookies bool
	keyHost      string
}

// New returns an Engine for g, or an error for a nil g or Options out of
// range (each adapter panics with it, under its own name: a programming
// error at construction).
func New(g *guard.Group, o Options) (*Engine, error) {
	if err := o.check(g); err != nil {
		return nil, err
	}
	e := &Engine{
		g:           g,
		keyHeaders:  canonicalHeaders(o.KeyHeaders),
		keyFunc:     o.KeyFunc,
		maxBody:     o.MaxBodyBytes,
		honorClient: o.HonorClientNoCache,
		forwarding:  !o.UnkeyedForwarding,
	}
	if e.maxBody <= 0 {
		e.maxBody = DefaultMaxBodyBytes
	}
	st := o.Statuses
	if len(st) == 0 {
		st = DefaultStatuses
	}
	for _, s := range st {
		// A 304 answers a conditional request: it is never a stored
		// response (revalidation merges it into one).
		if s >= 200 && s < 500 && s != http.StatusPartialContent && s != http.StatusNotModified {
			e.statuses[s] = true
		}
	}
	e.upstream, e.strict = o.UpstreamWindows, o.RequireFreshness
	e.heuristic, e.storeCookies, e.keyHost = o.HeuristicFreshness, o.StoreSetCookie, o.KeyHost
	switch {
	case o.TargetedCacheControl != nil:
		// In the order given: the first present rules.
		for _, n := range o.TargetedCacheControl {
			if n = http.CanonicalHeaderKey(strings.TrimSpace(n)); n != "" && !slices.Contains(e.targets, n) {
				e.targets = append(e.targets, n)
			}
		}
	case o.UpstreamWindows:
		e.targets = []string{"Cdn-Cache-Control"}
	}
	switch e.passFor, e.notStored = o.PassFor, o.NotStored; {
	case e.passFor == 0:
		e.passFor = DefaultPassFor
	case e.passFor < 0:
		e.passFor = 0
	}
	return e, nil
}

// check reports the first setting of o that cannot work with g.
func (o Options) check(g *guard.Group) error {
	if g == nil {
		return errors.New("nil *guard.Group")
	}
	switch max := g.Options().MaxValueBytes; {
	case o.MaxBodyBytes < 0:
		return fmt.Errorf("negative MaxBodyBytes %d", o.MaxBodyBytes)
	case o.MaxBodyBytes > max:
		return fmt.Errorf("MaxBodyBytes %d is above the Group's MaxValueBytes %d: such a body could never be stored", o.MaxBodyBytes, max)
	}
	for _, s := range o.Statuses {
		if s < 200 || s > 499 || s == http.StatusPartialContent || s == http.StatusNotModified {
			return fmt.Errorf("the Statuses setting holds %d: a 1xx, 206, 304 or 5xx is never shared by its status (a 5xx the origin marks fresh is, with UpstreamWindows)", s)
		}
	}
	for _, list := range []struct {
		name  string
		names []string
	}{{"KeyHeaders", o.KeyHeaders}, {"TargetedCacheControl", o.TargetedCacheControl}} {
		for _, n := range list.names {
			if !validName([]byte(strings.TrimSpace(n))) {
				return fmt.Errorf("%s holds %q, not a header field name", list.name, n)
			}
		}
	}
	if strings.ContainsFunc(o.KeyHost, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("KeyHost %q holds a space or a control character", o.KeyHost)
	}
	return nil
}

// Handler runs the downstream handler, writing to w, for r.
type Handler func(w http.ResponseWriter, r *http.Request) error

// StatusError is returned by Serve when the engine, not the handler,
// decides the answer: the adapter renders Code its framework's way.
type StatusError struct {
	Code int
	Err  error
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("httpcache: %d %s: %v", e.Code, http.StatusText(e.Code), e.Err)
}

func (e *StatusError) Unwrap() error { return e.Err }

// Serve answers r on w. direct runs the handler for this request on w as it
// is (for requests that are not shared); nil means h(w, r). h runs the handler on a detached
// copy of r and a capturing writer, possibly in another goroutine and after
// Serve returned, so it must not touch anything of this request but its
// arguments. Serve returns the error of a handler run for this request, or
// a *StatusError; a handler panic with http.ErrAbortHandler is re-panicked.
func (e *Engine) Serve(w http.ResponseWriter, r *http.Request, direct func() error, h Handler) error {
	if e.bypass(r) != "" {
		w.Header().Set("Cache-Status", cachestatus.Bypass)
		return runDirect(direct, h, w, r)
	}
	if e.keyFunc != nil {
		return e.ServeKey(w, r, e.keyFunc(r), direct, h)
	}
	return e.serve(w, r, deriveKey(r, e.host(r), e.keyHeaders, e.forwarding), direct, h, true)
}

// ServeKey is Serve with the key of a custom key func (for adapters whose
// key funcs take their framework's context); "" means not shared.
func (e *Engine) ServeKey(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler) error {
	if key == "" || e.bypass(r) != "" {
		w.Header().Set("Cache-Status", cachestatus.Bypass)
		return runDirect(direct, h, w, r)
	}
	return e.serve(w, r, userKeyPrefix+key, direct, h, true)
}

// runDirect runs the handler for this request on w as it is.
func runDirect(direct func() error, h Handler, w http.ResponseWriter, r *http.Request) error {
	if direct == nil {
		return h(w, r)
	}
	return direct()
}

func (e *Engine) serve(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler, again bool) error {
	if r.Method == http.MethodHead || (e.honorClient && onlyIfCached(r.Header)) {
		return e.peek(w, r, key, direct, h)
	}
	if len(r.Header["Range"]) > 0 {
		return e.serveRange(w, r, key, direct, h)
	}
	return e.serveCall(w, r, &call{e: e, key: key, w: w, r: r, h: h}, direct, again)
}

// peek serves r from what is stored under key, loading nothing: a HEAD,
// which its handler answers cheaply itself when nothing is stored (RFC 9110
// §9.3.2: it is not turned into a GET to fill the entry), and a client's
// only-if-cached (RFC 9111 §5.2.1.7: 504 when nothing is stored).
func (e *Engine) peek(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler) error {
	if sr, res, ok := e.stored(r, key); ok {
		e.write(w, r, &sr, res, cachestatus.Of(res.Status))
		return nil
	}
	w.Header().Set("Cache-Status", cachestatus.Miss)
	if r.Method != http.MethodHead {
		return &StatusError{Code: http.StatusGatewayTimeout, Err: errNotStored}
	}
	return runDirect(direct, h, w, r)
}

// stored returns the response stored for r under key (its variant, when
// the key holds a vary record), if there is one r may be served, reading
// it only: no load, no lease, no wait.
func (e *Engine) stored(r *http.Request, key string) (storedResponse, guard.Result, bool) {
	ctx := r.Context()
	res, err := e.g.Peek(ctx, key)
	if err == nil && isRecord(res.Value) {
		var rec varyRecord
		if rec, err = decodeRecord(res.Value); err == nil {
			res, err = e.g.Peek(ctx, variantKey(key, rec, r))
		}
	}
	if err != nil {
		return storedResponse{}, res, false
	}
	sr, derr := decodeResponse(res.Value)
	return sr, res, derr == nil && e.usable(r, &sr, res)
}

var errNotStored = errors.New("httpcache: only-if-cached, and nothing usable is stored")

func onlyIfCached(h http.Header) bool {
	return len(h["Cache-Control"]) > 0 && parseCacheControl(h["Cache-Control"]).onlyIfCached
}

// waitOnce makes a request that waited the Group's WaitTimeout for another
// request's handler call answer 503 rather than run the handler too: a
// slow or failing handler never sees one call per node at once.
var waitOnce = []guard.CallOption{guard.WithWaitTimeoutPolicy(guard.ReturnError)}

// serveCall serves c's request from c's key: the URL's key, or, with
// c.vary set, one of its variants.
func (e *Engine) serveCall(w http.ResponseWriter, r *http.Request, c *call, direct func() error, again bool) error {
	ctx := r.Context()
	res, err := e.g.Do(ctx, c.key, c.load, waitOnce...)
	if c.detach(ctx) {
		// This call's own load streamed its response to w.
		return c.outcome(w)
	}
	if err == nil {
		switch {
		case isRecord(res.Value) && c.vary == nil:
			if rec, derr := decodeRecord(res.Value); derr == nil {
				v := &call{e: e, key: variantKey(c.key, rec, r), w: w, r: r, h: c.h, vary: rec.names, primary: c.key}
				v.filled = c.filledKey()
				return e.serveCall(w, r, v, direct, again)
			}
		default:
			if sr, derr := decodeResponse(res.Value); derr == nil {
				if st := c.status(res); e.usable(r, &sr, res) {
					e.write(w, r, &sr, res, st)
					return nil
				}
				w.Header().Set("Cache-Status", cachestatus.Request)
				return runDirect(direct, c.h, w, r)
			}
		}
		// Garbage under the key: drop it and try once more; the guard
		// coalesces the retries, so a corrupt entry is not a stampede.
		if again && e.g.Invalidate(ctx, c.key) == nil {
			c2 := &call{e: e, key: c.key, w: w, r: r, h: c.h, vary: c.vary, primary: c.primary}
			return e.serveCall(w, r, c2, direct, false)
		}
		w.Header().Set("Cache-Status", cachestatus.Miss)
		return runDirect(direct, c.h, w, r)
	}
	return e.failed(w, r, c, err, direct)
}

// failed answers c's request when the guard returned err.
func (e *Engine) failed(w http.ResponseWriter, r *http.Request, c *call, err error, direct func() error) error {
	var ns *notShared
	var pe *guard.PanicError
	switch {
	case errors.As(err, &ns) && c.loaded():
		// This call's own load answered it (the guard hands a load's
		// private answer to its own caller only): the response it held,
		// its panic, or the handler's error (echo, gin).
		return c.outcome(w)
	case errors.As(err, &pe):
		if errors.Is(pe, http.ErrAbortHandler) {
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Cache-Status", cachestatus.Miss)
		return &StatusError{Code: http.StatusInternalServerError, Err: err}
	case errors.Is(err, guard.ErrBackoff) || errors.Is(err, guard.ErrWaitTimeout):
		// No turn at a failing handler, or another request's call did
		// not end, within WaitTimeout.
		w.Header().Set("Cache-Status", cachestatus.Miss)
		w.Header().Set("Retry-After", "1")
		return &StatusError{Code: http.StatusServiceUnavailable, Err: err}
	case errors.Is(err, guard.ErrLoadTimeout):
		// The handler call of this request (or the one it waited on) ran
		// past LoadTimeout and was abandoned: it may still be running, so
		// nobody runs the handler again for it.
		w.Header().Set("Cache-Status", cachestatus.Miss)
		return &StatusError{Code: http.StatusGatewayTimeout, Err: err}
	case r.Context().Err() != nil:
		return nil // the client is gone
	}
	w.Header().Set("Cache-Status", cachestatus.Miss)
	return runDirect(direct, c.h, w, r)
}

// host is the host keyed for r: Config.KeyHost, else r.Host.
func (e *Engine) host(r *http.Request) string {
	if e.keyHost != "" {
		return e.keyHost
	}
	return r.Host
}

// dropTargeted removes from h the targeted fields of this cache's own
// (the list of Config.TargetedCacheControl) before a response goes out;
// CDN-Cache-Control, addressed to every CDN cache on the path, goes on to
// the next (RFC 9213 §3: such caches typically forward it).
func (e *Engine) dropTargeted(h http.Header) {
	for _, name := range e.targets {
		if name != "Cdn-Cache-Control" {
			delete(h, name)
		}
	}
}

// usable reports whether a client's request directives let it be served
// sr (RFC 9111 §5.2.1); they are read only with HonorClientNoCache.
func (e *Engine) usable(r *http.Request, sr *storedResponse, res guard.Result) bool {
	if !e.honorClient || len(r.Header["Cache-Control"]) == 0 {
		return true
	}
	cc := parseCacheControl(r.Header["Cache-Control"])
	age := sr.initialAge + int64(res.Age/time.Second)
	switch {
	case cc.maxAge >= 0 && age > cc.maxAge && (res.Status != guard.Stale || cc.maxStale < 0):
		return false
	case cc.minFresh >= 0 && (res.Status == guard.Stale || res.Fresh < time.Duration(cc.minFresh)*time.Second):
		return false
	}
	return true
}

// write serves a stored response, or the 304 or 412 the request's
// preconditions make of it.
func (e *Engine) write(w http.ResponseWriter, r *http.Request, sr *storedResponse, res guard.Result, status string) {
	age := strconv.FormatInt(min(sr.initialAge+int64(res.Age/time.Second), maxDelta), 10)
	switch precondition(r, sr) {
	case http.StatusNotModified:
		writeNotModified(w, sr, age, status)
		return
	case http.StatusPreconditionFailed:
		dst := w.Header()
		dst["Cache-Status"] = []string{status}
		dst["Content-Type"] = []string{"text/plain; charset=utf-8"}
		w.WriteHeader(http.StatusPreconditionFailed)
		return
	}
	dst := w.Header()
	for _, f := range sr.fields {
		dst[f.name] = f.vals
	}
	e.dropTargeted(dst)
	noSniff(dst)
	// The room decodeResponse left: no allocation per field.
	extra := sr.extra[:extraFields:extraFields]
	extra[0], extra[1], extra[2] = age, status, sr.contentLength
	upstream := dst["Cache-Status"]
	dst["Age"], dst["Cache-Status"] = extra[0:1:1], extra[1:2:2]
	if len(upstream) > 0 {
		dst["Cache-Status"] = followCacheStatus(upstream, status)
	}
	withBody := sr.status != http.StatusNoContent && sr.status != http.StatusNotModified
	if withBody {
		dst["Content-Length"] = extra[2:3:3]
	}
	w.WriteHeader(sr.status)
	if withBody && r.Method != http.MethodHead {
		_, _ = w.Write(sr.body)
	}
}

// followCacheStatus is the Cache-Status of a response that carried
// upstream's members: this cache's member follows them (RFC 9211 §2: the
// last member is the cache closest to the client).
func followCacheStatus(upstream []string, member string) []string {
	return append(slices.Clip(upstream), member)
}

// notShared is the error a load wraps in guard.NoStore when its response is
// not shareable: the other callers of the flight run their own handler.
type notShared struct {
	reason string
}

func (n *notShared) Error() string { return "httpcache: response not shared: " + n.reason }
