package httpcache

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/garbage"
	"github.com/stampede-go/stampede/internal/tierhit"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// engine is the cache behind Engine, shared by every framework: it serves
// one request through the guard (this file), decides what is shared
// (policy.go), captures the handler's response (writer.go, call.go),
// stores and serves it (response.go, freshness.go, vary.go, range.go,
// conditional.go, revalidate.go) and invalidates (invalidate.go). It is
// safe for concurrent use.
type engine struct {
	g            *guard.Group
	keyHeaders   []string
	reqKey       func(*http.Request) string // net/http's Config.KeyFunc, for invalidation
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
	keys         *memo[keyEntry] // derived keys (key_memo.go)
	hits         *memo[hitEntry] // decoded stored responses (hit.go)
	drops        garbage.Drops   // per key: requests that found garbage
}

// newEngine returns the engine of cfg, its defaults filled in: the one
// place they are.
func newEngine[C any](g *guard.Group, cfg *Config[C]) *engine {
	e := &engine{
		g:           g,
		keyHeaders:  canonicalHeaders(cfg.KeyHeaders),
		maxBody:     cfg.MaxBodyBytes,
		honorClient: cfg.HonorClientNoCache,
		forwarding:  !cfg.UnkeyedForwarding,
		keys:        newMemo[keyEntry](),
		hits:        newMemo[hitEntry](),
	}
	// Only a net/http KeyFunc can be called on a request the engine makes.
	e.reqKey, _ = any(cfg.KeyFunc).(func(*http.Request) string)
	if e.maxBody <= 0 {
		e.maxBody = defaultMaxBodyBytes
	}
	st := cfg.Statuses
	if len(st) == 0 {
		st = defaultStatuses
	}
	for _, s := range st {
		if statusShareable(s) {
			e.statuses[s] = true
		}
	}
	e.upstream, e.strict = cfg.UpstreamWindows, cfg.RequireFreshness
	e.heuristic, e.storeCookies, e.keyHost = cfg.HeuristicFreshness, cfg.StoreSetCookie, cfg.KeyHost
	switch {
	case cfg.TargetedCacheControl != nil:
		// In the order given: the first present rules.
		for _, n := range cfg.TargetedCacheControl {
			if n = http.CanonicalHeaderKey(strings.TrimSpace(n)); n != "" && !slices.Contains(e.targets, n) {
				e.targets = append(e.targets, n)
			}
		}
	case cfg.UpstreamWindows:
		e.targets = []string{"Cdn-Cache-Control"}
	}
	switch e.passFor, e.notStored = cfg.PassFor, cfg.NotStored; {
	case e.passFor == 0:
		e.passFor = defaultPassFor
	case e.passFor < 0:
		e.passFor = 0
	}
	return e
}

// runDirect runs the handler for this request on w as it is.
func runDirect(direct func() error, h Handler, w http.ResponseWriter, r *http.Request) error {
	if direct == nil {
		return h(w, r)
	}
	return direct()
}

func (e *engine) serve(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler, again bool) error {
	if r.Method == http.MethodHead || (e.honorClient && onlyIfCached(r.Header)) {
		return e.peek(w, r, key, direct, h)
	}
	if len(r.Header["Range"]) > 0 {
		return e.serveRange(w, r, key, direct, h)
	}
	if handled, body, err := e.fromTier(w, r, key, direct, h); handled {
		if body != nil {
			// Written here, not deeper: see fromTier.
			_, _ = w.Write(body)
		}
		return err
	}
	return e.serveCall(w, r, &call{e: e, key: key, w: w, r: r, h: h}, direct, again)
}

// fromTier serves a GET whose answer the guard's in-process tier holds,
// as serveCall would serve the same answer from Do, without the call
// record and load Do must be handed first: a hit from memory allocates
// nothing here. handled is false when the tier has no answer, or one
// serveCall handles otherwise (garbage under the key); serveCall then
// calls Do. A URL that varies takes its record and its variant from the
// tier too, or serves the variant through serveCall.
//
// The response's head is written here; its body, when it has one, is
// returned for serve to write. net/http writes the head to the connection
// on that first Write, in frames of about 4.5 KiB of stack, on top of
// whatever frames are on the stack then. Made from serve, the Write keeps
// a hit's deepest point within the 8 KiB stack net/http's connection
// goroutine keeps between collections; made from the frames below serve,
// it crossed it, and the goroutine's stack was copied to a larger one
// after every collection had shrunk it: 3-4 % of a node's CPU in
// BenchmarkHTTPPeers. So the rare paths (a vary record, garbage) are
// functions of their own, and this one stays small.
func (e *engine) fromTier(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler) (handled bool, body []byte, err error) {
	res, ok := e.tierHit(r, key)
	if !ok {
		return false, nil, nil
	}
	if isRecord(res.Value) {
		return e.fromTierVaried(w, r, key, &res, direct, h)
	}
	return e.fromTierServe(w, r, key, &res, nil, "", direct, h)
}

// fromTierVaried is fromTier for a key that holds a vary record: the
// variant r selects is served from the tier too, or through serveCall.
func (e *engine) fromTierVaried(w http.ResponseWriter, r *http.Request, key string, res *guard.Result, direct func() error, h Handler) (bool, []byte, error) {
	rec, derr := decodeRecord(res.Value)
	if derr != nil {
		return true, nil, e.garbage(w, r, &call{e: e, key: key, w: w, r: r, h: h}, res.Value, direct, true)
	}
	vkey := variantKey(key, rec, r)
	vres, ok := e.tierHit(r, vkey)
	if !ok || isRecord(vres.Value) {
		v := &call{e: e, key: vkey, w: w, r: r, h: h, vary: rec.names, primary: key}
		if !ok {
			return true, nil, e.serveCall(w, r, v, direct, true)
		}
		return true, nil, e.garbage(w, r, v, vres.Value, direct, true)
	}
	return e.fromTierServe(w, r, vkey, &vres, rec.names, key, direct, h)
}

// fromTierServe serves res, the tier's answer for key, which is not a
// vary record; vary and primary are the record's names and key when key
// is a variant's.
func (e *engine) fromTierServe(w http.ResponseWriter, r *http.Request, key string, res *guard.Result, vary []string, primary string, direct func() error, h Handler) (bool, []byte, error) {
	sr, derr := e.decoded(key, res.Value)
	if derr != nil {
		c := &call{e: e, key: key, w: w, r: r, h: h, vary: vary, primary: primary}
		return true, nil, e.garbage(w, r, c, res.Value, direct, true)
	}
	if !e.usable(r, &sr, *res) {
		w.Header().Set("Cache-Status", cachestatus.Request)
		return true, nil, runDirect(direct, h, w, r)
	}
	return true, e.writeHead(w, r, &sr, *res, cachestatus.Of(res.Status)), nil
}

// tierHit is the guard's answer for key from its in-process tier alone,
// if it has one (see package internal/tierhit).
func (e *engine) tierHit(r *http.Request, key string) (guard.Result, bool) {
	val, stale, age, fresh, ok := tierhit.Hit(e.g, r.Context(), key)
	if !ok {
		return guard.Result{}, false
	}
	res := guard.Result{Value: val, Status: guard.Hit, Age: age, Fresh: fresh}
	if stale {
		res.Status = guard.Stale
	}
	return res, true
}

// peek serves r from what is stored under key, loading nothing: a HEAD,
// which its handler answers cheaply itself when nothing is stored (RFC 9110
// §9.3.2: it is not turned into a GET to fill the entry), and a client's
// only-if-cached (RFC 9111 §5.2.1.7: 504 when nothing is stored).
func (e *engine) peek(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler) error {
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
func (e *engine) stored(r *http.Request, key string) (storedResponse, guard.Result, bool) {
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
	sr, derr := e.decoded(key, res.Value)
	return sr, res, derr == nil && e.usable(r, &sr, res)
}

var errNotStored = errors.New("httpcache: only-if-cached, and nothing usable is stored")

func onlyIfCached(h http.Header) bool {
	return len(h["Cache-Control"]) > 0 && parseCacheControl(h["Cache-Control"]).onlyIfCached
}

// waitOnce makes a request that waited the Group's WaitTimeout for another
// request's handler call share one backup call of the handler, fleet-wide,
// rather than answer 503 because of the other request's inputs (a slow
// unkeyed header or body), or run the handler on every node: a slow or
// failing handler sees at most two calls for a URL at once. 503 comes
// only when the backup's call has not answered within another WaitTimeout.
var waitOnce = []guard.CallOption{guard.WithWaitTimeoutPolicy(guard.BackupLoad)}

// whyCapped is what NotStored and Cache-Status say of a response not
// stored because its URL holds guard.Options.MaxTagKeys variants already.
const whyCapped = "too many variants"

// serveCall serves c's request from c's key: the URL's key, or, with
// c.vary set, one of its variants.
func (e *engine) serveCall(w http.ResponseWriter, r *http.Request, c *call, direct func() error, again bool) error {
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
			if sr, derr := e.decoded(c.key, res.Value); derr == nil {
				if h := e.notStored; h != nil && res.Capped {
					h(r, whyCapped)
				}
				if st := c.status(res); e.usable(r, &sr, res) {
					e.write(w, r, &sr, res, st)
					return nil
				}
				w.Header().Set("Cache-Status", cachestatus.Request)
				return runDirect(direct, c.h, w, r)
			}
		}
		return e.garbage(w, r, c, res.Value, direct, again)
	}
	return e.failed(w, r, c, err, direct)
}

// garbage answers c's request when seen, the value under c.key, does not
// decode: it drops the entry and tries once more (again), the guard
// coalescing the retries, so that a corrupt entry is not a stampede; else
// the handler answers.
func (e *engine) garbage(w http.ResponseWriter, r *http.Request, c *call, seen []byte, direct func() error, again bool) error {
	if again && e.drops.Drop(r.Context(), e.g, c.key, seen) {
		c2 := &call{e: e, key: c.key, w: w, r: r, h: c.h, vary: c.vary, primary: c.primary}
		return e.serveCall(w, r, c2, direct, false)
	}
	w.Header().Set("Cache-Status", cachestatus.Miss)
	return runDirect(direct, c.h, w, r)
}

// failed answers c's request when the guard returned err.
func (e *engine) failed(w http.ResponseWriter, r *http.Request, c *call, err error, direct func() error) error {
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
func (e *engine) host(r *http.Request) string {
	if e.keyHost != "" {
		return e.keyHost
	}
	return r.Host
}

// dropTargeted removes from h the targeted fields of this cache's own
// (the list of Config.TargetedCacheControl) before a response goes out;
// CDN-Cache-Control, addressed to every CDN cache on the path, goes on to
// the next (RFC 9213 §3: such caches typically forward it).
func (e *engine) dropTargeted(h http.Header) {
	for _, name := range e.targets {
		if name != "Cdn-Cache-Control" {
			delete(h, name)
		}
	}
}

// usable reports whether a client's request directives let it be served
// sr (RFC 9111 §5.2.1); they are read only with HonorClientNoCache.
func (e *engine) usable(r *http.Request, sr *storedResponse, res guard.Result) bool {
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
func (e *engine) write(w http.ResponseWriter, r *http.Request, sr *storedResponse, res guard.Result, status string) {
	if body := e.writeHead(w, r, sr, res, status); body != nil {
		_, _ = w.Write(body)
	}
}

// writeHead is write without the body's Write: it returns the body to
// write, or nil when the response has none (a HEAD, a 204, a 304, a 412).
func (e *engine) writeHead(w http.ResponseWriter, r *http.Request, sr *storedResponse, res guard.Result, status string) []byte {
	age := sr.ageField(min(sr.initialAge+int64(res.Age/time.Second), maxDelta))
	switch precondition(r, sr) {
	case http.StatusNotModified:
		writeNotModified(w, sr, age, status)
		return nil
	case http.StatusPreconditionFailed:
		dst := w.Header()
		dst["Cache-Status"] = statusField(status)
		dst["Content-Type"] = []string{"text/plain; charset=utf-8"}
		w.WriteHeader(http.StatusPreconditionFailed)
		return nil
	}
	dst := w.Header()
	for _, f := range sr.fields {
		dst[f.name] = f.vals
	}
	e.dropTargeted(dst)
	noSniff(dst)
	// Fields made once (hit.go): no allocation per hit.
	if upstream := dst["Cache-Status"]; len(upstream) > 0 {
		dst["Cache-Status"] = followCacheStatus(upstream, status)
	} else {
		dst["Cache-Status"] = statusField(status)
	}
	dst["Age"] = age
	withBody := sr.status != http.StatusNoContent && sr.status != http.StatusNotModified
	if withBody {
		dst["Content-Length"] = sr.contentLength
	}
	w.WriteHeader(sr.status)
	if withBody && r.Method != http.MethodHead {
		if sr.body == nil {
			return emptyBody // written all the same, as before
		}
		return sr.body
	}
	return nil
}

// emptyBody is the body of a response whose body is empty: not nil, which
// says there is none to write.
var emptyBody = []byte{}

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
