package httpcache

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/stampede-go/stampede/guard"
)

// call is one request served through the guard. Its load may run in
// another goroutine, while the request waits in Serve or after it left;
// mu guards the hand-over of the client's writer.
type call struct {
	e    *Engine
	key  string
	r    *http.Request
	h    Handler
	used *windows // the windows given to the guard, when learned upstream

	mu       sync.Mutex
	w        http.ResponseWriter // the client's writer; nil once Serve stops waiting
	ran      bool                // load was called
	passed   bool                // load started streaming to w
	done     chan struct{}       // closed when load ends
	panicked bool
	err      error // the handler's error
	cancel   context.CancelFunc
}

var errClientGone = errors.New("httpcache: client gone")

// load runs the handler once for the flight the guard started with it.
func (c *call) load(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	if c.ran {
		// A second flight with this call's load (the first answered
		// NoStore and the caller joined again): the handler already ran
		// for this request.
		c.mu.Unlock()
		return nil, guard.NoStore(&notShared{reason: "already answered"})
	}
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
			cw.pass()
		}
		return nil, guard.NoStore(&notShared{reason: "handler error"})
	}
	if !cw.wroteHeader {
		cw.WriteHeader(http.StatusOK)
	}
	if cw.passing {
		return nil, guard.NoStore(&notShared{reason: cw.why})
	}
	if c.e.memo != nil {
		if win, ok := upstreamWindows(cw.snap); ok {
			if win.freshSet && win.fresh == 0 {
				cw.pass()
				return nil, guard.NoStore(&notShared{reason: "max-age=0"})
			}
			if c.used == nil || win.shorter(*c.used) {
				// The guard would keep it longer than its origin allows:
				// learn the windows, answer the leader, and let the
				// others call the guard again with them.
				c.e.memo.Add(c.key, win)
				cw.pass()
				return nil, guard.NoStore(&notShared{reason: "new upstream windows", retry: true})
			}
			if win != *c.used {
				c.e.memo.Add(c.key, win) // longer: used from the next load on
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
	if !c.passed {
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

// outcome is what Serve returns once this call's own load answered it.
func (c *call) outcome() error {
	c.mu.Lock()
	panicked, passed, err := c.panicked, c.passed, c.err
	c.mu.Unlock()
	if panicked && passed {
		// Part of the response is out: abort the connection so the client
		// sees a truncated response, not a complete one.
		panic(http.ErrAbortHandler)
	}
	return err
}

// capture is the ResponseWriter of a load: it buffers a shareable response
// up to MaxBodyBytes and streams anything else to the leader's client.
type capture struct {
	c           *call
	header      http.Header
	snap        http.Header // header as of WriteHeader
	status      int
	wroteHeader bool
	buf         []byte
	passing     bool
	why         string
}

func (cw *capture) Header() http.Header { return cw.header }

func (cw *capture) WriteHeader(code int) {
	if cw.wroteHeader || code < 200 {
		return // informational responses are not forwarded
	}
	cw.wroteHeader, cw.status = true, code
	cw.snap = cw.header.Clone()
	if cw.snap == nil {
		cw.snap = http.Header{}
	}
	if !cw.c.e.shareable(code, cw.snap) {
		cw.why = "response not shareable"
		cw.pass()
	}
}

func (cw *capture) Write(p []byte) (int, error) {
	if !cw.wroteHeader {
		if _, ok := cw.header["Content-Type"]; !ok && len(p) > 0 {
			// As net/http would; the stored header must carry it too.
			cw.header.Set("Content-Type", http.DetectContentType(p))
		}
		cw.WriteHeader(http.StatusOK)
	}
	if !cw.passing && len(cw.buf)+len(p) > cw.c.e.maxBody {
		cw.why = "body over MaxBodyBytes"
		cw.pass()
	}
	if cw.passing {
		return cw.forward(p)
	}
	cw.buf = append(cw.buf, p...)
	return len(p), nil
}

// Flush forwards a flush of a streamed response; a buffered one has
// nothing to flush.
func (cw *capture) Flush() {
	if !cw.passing {
		return
	}
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w != nil {
		_ = http.NewResponseController(c.w).Flush()
	}
}

// pass switches to streaming: what was buffered goes to the leader's client
// if it still waits; otherwise the handler's context is cancelled, as no
// one will read its response.
func (cw *capture) pass() {
	if cw.passing {
		return
	}
	cw.passing = true
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		c.cancel()
		return
	}
	c.passed = true
	dst := c.w.Header()
	for k, v := range cw.snap {
		dst[k] = v
	}
	dst.Set("Cache-Status", csMiss)
	c.w.WriteHeader(cw.status)
	if len(cw.buf) > 0 {
		_, _ = c.w.Write(cw.buf)
	}
	cw.buf = nil
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
