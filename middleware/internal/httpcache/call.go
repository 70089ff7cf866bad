package httpcache

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/cachestatus"
)

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
	e   *Engine
	key string
	r   *http.Request
	h   Handler

	mu        sync.Mutex
	w         http.ResponseWriter // the client's writer; nil once Serve stops waiting
	ran       bool                // load was called
	streaming bool                // load started writing to w
	done      chan struct{}       // closed when load ends
	panicked  bool
	err       error    // the handler's error
	held      *capture // the unshared response load ended with, not streamed
	cancel    context.CancelFunc
}

var errClientGone = errors.New("httpcache: client gone")

// load runs the handler once for the flight the guard started with it.
func (c *call) load(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The guard calls a Do's load at most once, so the handler runs at
	// most once for this request.
	c.mu.Lock()
	c.ran, c.cancel, c.done = true, cancel, make(chan struct{})
	c.mu.Unlock()

	cw := &capture{c: c, header: make(http.Header)}
	normal := false
	defer func() {
		c.mu.Lock()
		c.panicked = !normal
		c.mu.Unlock()
		close(c.done)
	}()

	req := c.r.Clone(ctx)
	// HEAD shares GET's entry, so the entry must hold GET's body.
	req.Method = http.MethodGet
	req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	herr := c.h(cw, req)
	normal = true

	if herr != nil {
		c.mu.Lock()
		c.err = herr
		c.mu.Unlock()
		if cw.wroteHeader {
			cw.hold()
		}
		return nil, guard.NoStore(&notShared{reason: "handler error"})
	}
	if !cw.wroteHeader {
		cw.WriteHeader(http.StatusOK)
	}
	if cw.unshared {
		cw.hold()
		return nil, guard.NoStore(&notShared{reason: cw.why})
	}
	if c.e.upstream {
		if win, ok := upstreamWindows(cw.snap); ok {
			if win.freshSet && win.fresh == 0 {
				cw.hold()
				return nil, guard.NoStore(&notShared{reason: "max-age=0"})
			}
			// This response's own windows, from its first load on.
			if err := guard.SetWindows(ctx, win.guardWindows()); err != nil {
				cw.hold()
				return nil, guard.NoStore(&notShared{reason: err.Error()})
			}
		}
	}
	if _, ok := cw.snap["Content-Type"]; !ok && len(cw.buf) > 0 {
		cw.snap["Content-Type"] = []string{http.DetectContentType(cw.buf)}
	}
	return encodeEntry(cw.status, cw.snap, cw.buf), nil
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
	panicked, streaming, err, held := c.panicked, c.streaming, c.err, c.held
	c.held = nil
	c.mu.Unlock()
	if panicked && streaming {
		// Part of the response is out: abort the connection so the client
		// sees a truncated response, not a complete one.
		panic(http.ErrAbortHandler)
	}
	if held != nil {
		held.writeTo(w, c.r.Method != http.MethodHead)
	}
	return err
}

// capture is the ResponseWriter of a load: it buffers the response up to
// MaxBodyBytes, and streams to the caller's client only a response that is
// not shared and outgrows that or is flushed.
type capture struct {
	c           *call
	header      http.Header
	snap        http.Header // header as of WriteHeader
	status      int
	wroteHeader bool
	buf         []byte
	unshared    bool // the response is not stored
	streaming   bool // the response goes to the client as it is written
	why         string
}

func (cw *capture) Header() http.Header { return cw.header }

func (cw *capture) WriteHeader(code int) {
	if cw.wroteHeader || code < 200 {
		return // informational responses are not forwarded
	}
	cw.wroteHeader, cw.status = true, code
	cw.snap = canonical(cw.header)
	if !cw.c.e.shareable(code, cw.snap) {
		cw.unshare("response not shareable")
	}
}

// canonical returns a copy of h under canonical names, as the rules read
// them: a handler may set h["set-cookie"] directly, and net/http sends it.
func canonical(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, v := range h {
		ck := http.CanonicalHeaderKey(k)
		out[ck] = append(out[ck], v...)
	}
	return out
}

func (cw *capture) Write(p []byte) (int, error) {
	if !cw.wroteHeader {
		if _, ok := cw.header["Content-Type"]; !ok && len(p) > 0 {
			// As net/http would; the stored header must carry it too.
			cw.header.Set("Content-Type", http.DetectContentType(p))
		}
		cw.WriteHeader(http.StatusOK)
	}
	if !cw.streaming && len(cw.buf)+len(p) > cw.c.e.maxBody {
		cw.unshare("body over MaxBodyBytes")
		cw.stream()
	}
	if cw.streaming {
		return cw.forward(p)
	}
	cw.buf = append(cw.buf, p...)
	return len(p), nil
}

// Flush sends an unshared response on to the client, headers first, as
// net/http would (server-sent events depend on it); a response that may be
// stored is sent whole once complete.
func (cw *capture) Flush() {
	if !cw.wroteHeader {
		cw.WriteHeader(http.StatusOK)
	}
	if !cw.unshared {
		return
	}
	cw.stream()
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w != nil {
		_ = http.NewResponseController(c.w).Flush()
	}
}

// unshare marks the response as not stored. If nobody waits for it any
// more (the caller left, or was answered from the cache while this load
// refreshes the entry), the handler's context is cancelled.
func (cw *capture) unshare(why string) {
	if cw.unshared {
		return
	}
	cw.unshared, cw.why = true, why
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		c.cancel()
	}
}

// stream switches to streaming: what was buffered goes to the client if it
// still waits; otherwise the handler's context is cancelled, as no one will
// read its response.
func (cw *capture) stream() {
	if cw.streaming {
		return
	}
	cw.streaming = true
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		c.cancel()
		cw.buf = nil
		return
	}
	c.streaming = true
	cw.writeHeader(c.w)
	if len(cw.buf) > 0 {
		_, _ = c.w.Write(cw.buf)
	}
	cw.buf = nil
}

// hold hands the complete, unshared response to the call, for its caller
// if the guard's answer shows the load was the caller's.
func (cw *capture) hold() {
	if cw.streaming {
		return
	}
	c := cw.c
	c.mu.Lock()
	c.held = cw
	c.mu.Unlock()
}

func (cw *capture) writeHeader(w http.ResponseWriter) {
	dst := w.Header()
	for k, v := range cw.snap {
		dst[k] = v
	}
	dst.Set("Cache-Status", cachestatus.Miss)
	w.WriteHeader(cw.status)
}

// writeTo writes a held response to w.
func (cw *capture) writeTo(w http.ResponseWriter, body bool) {
	cw.writeHeader(w)
	if body && len(cw.buf) > 0 {
		_, _ = w.Write(cw.buf)
	}
}

func (cw *capture) forward(p []byte) (int, error) {
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		return 0, errClientGone
	}
	return c.w.Write(p)
}
