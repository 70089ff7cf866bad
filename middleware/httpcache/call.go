package httpcache

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/isolate"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// How the engine works, for its maintainers.
//
// For one key, the guard runs one load per refresh across the fleet. The
// load runs the handler on a copy of the request of the caller whose
// flight started it (the leader), detached from that caller's
// cancellation, and captures the response:
//
//   - shareable (policy.go) and no larger than
//     MaxBodyBytes: encoded and stored; every caller, the leader included,
//     is served from the entry;
//   - anything else: the load answers guard.NoStore, so nothing is stored,
//     and every other caller of the flight runs the handler for itself.
//     The response goes to the leader's own client, and to no one else.
//     It is held, like a shareable one, up to MaxBodyBytes, and written
//     once the guard's answer shows the load was the leader's: a load also
//     runs as a background refresh while its caller is served a stale (or,
//     with early refresh, fresh) entry, and that caller must get the entry,
//     not the refresh's 5xx (stale-if-error). A response that outgrows
//     MaxBodyBytes, or that its handler flushes (server-sent events), is
//     streamed to the leader's client as it is written instead, as long as
//     the client waits; if that happens before the guard answered, a caller
//     about to be served from the cache gets its own response instead.
//
// As an HTTP cache (RFC 9111): freshness.go reads a response's own
// freshness and places it (its guard windows, or why it is not stored);
// conditional.go answers a request's preconditions from the stored
// response; revalidate.go asks the handler conditionally when the guard
// refreshes a stored response with a validator, and merges its 304; vary.go
// stores responses per variant under the URL key's hash tag.
//
// A caller never receives a response produced for another caller unless
// that response was judged shareable first, and two requests share a key
// only if the frameworks hand their handlers the same inputs, as far as a
// handler may read them (key.go, forwarding.go): the cache-poisoning
// suite of package conformance holds every adapter to that.

// call is one request served through the guard. Its load may run in
// another goroutine, while the request waits in Serve or after it left;
// mu guards the hand-over of the client's writer.
//
// A load cannot tell whether it answers its caller (a miss) or runs as a
// background refresh while its caller is served a stale or fresh entry:
// the guard calls it the same way in both cases. So an unshared response
// is held, like a shared one, up to MaxBodyBytes, and handed to the caller
// only once the guard's answer shows it was the caller's (the load ended
// with NoStore). Only a response that outgrows MaxBodyBytes or is flushed
// by its handler is streamed to the client while the load runs.
type call struct {
	e   *engine
	key string
	r   *http.Request
	h   Handler
	// vary: the key is a variant of the URL key primary, selected by these
	// request headers (vary.go).
	vary    []string
	primary string
	filled  string // the variant key this request's own load filled

	mu        sync.Mutex
	w         http.ResponseWriter // the client's writer; nil once Serve stops waiting
	ran       bool                // load was called
	streaming bool                // load started writing to w
	done      chan struct{}       // closed when load ends
	panicked  bool
	panicVal  any      // what the handler panicked with
	goexited  bool     // the handler called runtime.Goexit
	cur       *capture // the capture of the handler run in progress
	err       error    // the handler's error
	// errHeader is the header of a handler that returned err before it
	// wrote anything: the fields it set for the error's renderer (a 401's
	// WWW-Authenticate, a 429's Retry-After), which would have been on its
	// request's response.
	errHeader http.Header
	held      *capture // the unshared response load ended with, not streamed
	cancel    context.CancelFunc
}

var errClientGone = errors.New("httpcache: client gone")

// load runs the handler for the flight the guard started with it, and
// says what became of its response. A response that is not shared answers
// this call's request only: a failure (the handler's error or panic, a 5xx,
// an incomplete body) as guard.Private, so that the other requests take
// turns at the handler instead of all calling it at once; a response that
// cannot be shared for reasons of its own (private, too large, a header the
// store cannot hold exactly...) as guard.Pass, so that the URL's requests
// skip the flight for a while.
func (c *call) load(ctx context.Context) (val []byte, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The guard calls a Do's load at most once, so the handler runs at
	// most once for this request (twice when a 304 selects nothing).
	c.mu.Lock()
	c.ran, c.cancel, c.done = true, cancel, make(chan struct{})
	c.mu.Unlock()
	defer func() {
		// A panic answers only this call's request: it is kept for Serve
		// to re-panic on the request's own goroutine.
		p := recover()
		c.mu.Lock()
		c.panicked, c.panicVal = p != nil, p
		cw := c.cur
		c.mu.Unlock()
		if p != nil && cw != nil && cw.wroteHeader {
			cw.hold("handler panic") // for what it flushed (outcome)
		}
		close(c.done)
		if p != nil {
			val, err = nil, guard.Private(&notShared{reason: "handler panic"})
		}
	}()

	old, record := c.previous(ctx)
	if record {
		return keepRecord(ctx)
	}
	cw, sent, herr := c.run(ctx, old)
	if herr == nil && old != nil && cw.status == http.StatusNotModified && !selects(cw.snap, old) {
		// A 304 whose validator is not the stored response's updates
		// nothing (RFC 9111 §4.3.4): ask again, unconditionally.
		old = nil
		cw, sent, herr = c.run(ctx, nil)
	}
	if herr != nil {
		// This call's request alone: Serve answers it with the handler's
		// error, or ends it as the handler's Goexit would have (outcome).
		why := "handler error"
		c.mu.Lock()
		if herr == errGoexit {
			c.goexited, why = true, "handler called runtime.Goexit"
		} else {
			c.err = herr
			if !cw.wroteHeader {
				c.errHeader = cw.header
			}
		}
		c.mu.Unlock()
		if cw.wroteHeader {
			cw.hold(why)
		}
		return nil, guard.Private(&notShared{reason: why})
	}
	if old != nil && cw.status == http.StatusNotModified {
		return c.revalidated(ctx, cw, old, sent)
	}
	if why := cw.failure(); why != "" {
		cw.hold(why)
		return nil, guard.Private(&notShared{reason: why})
	}
	if cw.hasTrailers() {
		cw.unshare("trailer fields")
	}
	if cw.unshared {
		return c.pass(cw, cw.why)
	}
	cc, targeted := c.e.responseCC(cw.snap)
	f := responseFreshness(cw.snap, cc, targeted, sent, cw.received)
	f.status = cw.status
	return c.store(ctx, cw, f)
}

// errGoexit is what runHandler returns for a handler that called
// runtime.Goexit.
var errGoexit = errors.New("httpcache: handler called runtime.Goexit")

// runHandler calls h(w, r) on a goroutine of its own (isolate.Call) and
// waits for it. A handler that calls runtime.Goexit (a helper giving up
// as t.FailNow does) ends that goroutine, not the load's, so the load can
// answer the guard that the failure is its request's alone, as it does for
// a panic: run inline, the Goexit would end the load, and the guard would
// hand every caller of the flight guard.ErrGoexit and back the key off. A
// panic is panicked again here, with its value.
func runHandler(h Handler, w http.ResponseWriter, r *http.Request) error {
	switch o := isolate.Call(func() error { return h(w, r) }); {
	case o.Panicked:
		panic(o.Value)
	case o.Goexit:
		return errGoexit
	default:
		return o.Err
	}
}

// run calls the handler on a detached copy of the request, asking
// conditionally when old is the stored response it refreshes.
func (c *call) run(ctx context.Context, old *storedResponse) (cw *capture, sent time.Time, err error) {
	cw = &capture{c: c, header: make(http.Header), declared: -1, sniffAt: -1, flushedAt: -1}
	c.mu.Lock()
	c.cur = cw
	c.mu.Unlock()
	req := c.r.Clone(ctx)
	// HEAD shares GET's entry, so the entry must hold GET's body; the
	// client's preconditions are answered from the entry, never stored.
	req.Method = http.MethodGet
	req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	stripConditionals(req.Header)
	if old != nil {
		askConditionally(req.Header, old)
		cw.revalidating = true
	}
	sent = time.Now()
	err = runHandler(c.h, cw, req)
	if err == nil && !cw.wroteHeader {
		cw.WriteHeader(http.StatusOK)
	}
	return cw, sent, err
}

// pass answers the load of a response that is complete but not shared: it
// is held for this call's request, and the URL is marked pass.
func (c *call) pass(cw *capture, why string) ([]byte, error) {
	cw.hold(why)
	if h := c.e.notStored; h != nil {
		h(c.r, why)
	}
	return nil, guard.Pass(&notShared{reason: why}, c.e.passFor)
}

// store encodes the captured response cw for its key with the windows its
// freshness gives it: as a variant when it varies on headers the key does
// not hold.
func (c *call) store(ctx context.Context, cw *capture, f freshness) ([]byte, error) {
	e := c.e
	p := e.place(f)
	names, star := e.varyNames(cw.snap)
	switch {
	case p.reason != "":
	case star:
		p.reason = "Vary: *"
	case c.vary != nil && !slices.Equal(names, c.vary):
		// The response no longer varies as the record says: drop the
		// record, so the next request learns the new names.
		p.reason = "Vary changed"
		_ = e.g.Invalidate(ctx, c.primary)
	}
	if p.reason != "" {
		return c.pass(cw, p.reason)
	}
	cw.sniff()
	val, ok := encodeExactly(cw.status, int64(f.initialAge/time.Second), cw.snap, cw.buf)
	if !ok {
		return c.pass(cw, "header not storable")
	}
	w := p.windows()
	if c.vary == nil && len(names) > 0 {
		rec := varyRecord{gen: newGeneration(), names: names}
		c.fillVariant(ctx, variantKey(c.key, rec, c.r), val, w)
		val, w = encodeRecord(rec), recordWindows(w)
	}
	if w != (guard.Windows{}) {
		if err := guard.SetWindows(ctx, w); err != nil {
			cw.hold("windows")
			return nil, guard.Private(&notShared{reason: "windows"})
		}
	}
	return val, nil
}

// fillVariant stores the variant val of a new record under key before the
// record itself lands, so that the callers woken by the record find their
// variant stored when it is this one, instead of calling the handler again.
func (c *call) fillVariant(ctx context.Context, key string, val []byte, w guard.Windows) {
	_, err := c.e.g.Do(ctx, key, func(ctx context.Context) ([]byte, error) {
		if w != (guard.Windows{}) {
			if err := guard.SetWindows(ctx, w); err != nil {
				return nil, err
			}
		}
		return val, nil
	})
	if err == nil {
		c.mu.Lock()
		c.filled = key
		c.mu.Unlock()
	}
}

// filledKey is the variant key c's own load filled, or "".
func (c *call) filledKey() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.filled
}

// status is the Cache-Status of res served to c's request.
func (c *call) status(res guard.Result) string {
	if res.Capped {
		return cachestatus.NotStored(whyCapped)
	}
	if filled := c.filledKey(); res.Status == guard.Hit && filled != "" && filled == c.key {
		return cachestatus.Stored
	}
	return cachestatus.Of(res.Status)
}

// detach is called when the guard answered: from now on the load writes
// nowhere. If the load already streams to the client, detach waits for it
// to finish (or for the client to leave) and reports true.
func (c *call) detach(ctx context.Context) bool {
	c.mu.Lock()
	if !c.streaming {
		c.w = nil
		c.mu.Unlock()
		return false
	}
	done := c.done
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		c.mu.Lock()
		c.w = nil
		c.cancel() // nobody will read the rest of this response
		c.mu.Unlock()
	}
	return true
}

func (c *call) loaded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ran
}

// outcome answers w once the guard reported that this call's own load
// ended without storing its response: the held response, if any, is
// written to w. It returns the handler's error.
func (c *call) outcome(w http.ResponseWriter) error {
	c.mu.Lock()
	panicked, goexited, streaming, err, held, cur, errHeader := c.panicked, c.goexited, c.streaming, c.err, c.held, c.cur, c.errHeader
	c.held, c.errHeader = nil, nil
	done := c.done
	c.mu.Unlock()
	select {
	case <-done:
	default:
		// The request's client left while the handler streamed to it
		// (detach): nothing more reaches it, and the handler, still
		// running, owns what it captured.
		return nil
	}
	if goexited {
		// As the handler would have on this goroutine: what it wrote
		// reaches the client (a truncated response, when it streamed),
		// then the request's goroutine ends, and net/http closes the
		// connection.
		if held != nil {
			held.writeFlushed(w, c.r.Method != http.MethodHead)
		}
		runtime.Goexit()
	}
	if panicked && streaming {
		// Part of the response is out: abort the connection so the client
		// sees a truncated response, not a complete one.
		panic(http.ErrAbortHandler)
	}
	if panicked {
		// As the handler would have on this goroutine: what it flushed
		// reaches the client, then net/http aborts the connection (or a
		// framework's recover middleware answers).
		c.mu.Lock()
		p := c.panicVal
		c.mu.Unlock()
		if held != nil {
			held.writeFlushed(w, c.r.Method != http.MethodHead)
		}
		panic(p)
	}
	switch {
	case held != nil:
		held.writeTo(w, c.r.Method != http.MethodHead)
	case streaming && cur != nil && !cur.hijacked:
		cur.trailersTo(w) // the rest of it went out as it was written
	case errHeader != nil:
		// Nothing written: the framework renders err on w, with the
		// fields the handler set for it, as it would have without the
		// cache (a fresh header per run: the handler is done with it).
		dst := w.Header()
		for k, v := range errHeader {
			dst[k] = v
		}
	}
	return err
}
