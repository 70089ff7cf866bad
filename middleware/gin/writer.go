package guardgin

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// writer is the gin.ResponseWriter of a detached handler run, on the
// engine's capturing http.ResponseWriter. Like gin's own, it holds the
// status until the first byte of the body (or WriteHeaderNow), so a handler
// may set headers after c.Status.
type writer struct {
	w      http.ResponseWriter
	status int
	size   int             // -1 until the header is written
	ctx    context.Context // the run's: done when nobody waits for it
	gone   chan bool       // CloseNotify's, made on first use
}

var _ gin.ResponseWriter = (*writer)(nil)

func newWriter(ctx context.Context, w http.ResponseWriter) *writer {
	return &writer{w: w, status: http.StatusOK, size: -1, ctx: ctx}
}

func (w *writer) Header() http.Header { return w.w.Header() }

func (w *writer) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.w.WriteHeader(w.status)
	}
}

func (w *writer) Write(b []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.w.Write(b)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.w, s)
	w.size += n
	return n, err
}

func (w *writer) Status() int   { return w.status }
func (w *writer) Size() int     { return w.size }
func (w *writer) Written() bool { return w.size != -1 }

func (w *writer) Flush() {
	w.WriteHeaderNow()
	if f, ok := w.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands the handler its request's connection when the run answers
// a request that still waits (the engine's writer decides); a background
// run has none. A response that hijacks is never shared.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.w).Hijack()
	if err == nil {
		w.size = 0 // the handler writes on the connection itself
	}
	return conn, brw, err
}

// CloseNotify returns a channel closed when the run's request context is
// done: the client it streams to left, or the run was abandoned. A run
// shared with other requests outlives any one client; gin's Stream and
// SSE loops read this channel to stop. (http.CloseNotifier is deprecated;
// gin's interface still requires it.)
func (w *writer) CloseNotify() <-chan bool {
	if w.gone == nil {
		gone := make(chan bool)
		w.gone = gone
		context.AfterFunc(w.ctx, func() { close(gone) })
	}
	return w.gone
}

func (w *writer) Pusher() http.Pusher { return nil }

// Unwrap lets http.ResponseController reach the engine's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.w }

// unsafeWriter is the gin.ResponseWriter of an unsafe request: it hands
// the response's status and fields to the engine's invalidation just
// before gin writes the status line (WriteHeaderNow, which every write
// and Flush go through), or when the chain ends without writing.
type unsafeWriter struct {
	gin.ResponseWriter
	before func(status int, h http.Header)
	done   bool
}

func (w *unsafeWriter) header() {
	if !w.done {
		w.done = true
		w.before(w.Status(), w.Header())
	}
}

func (w *unsafeWriter) WriteHeaderNow() { w.header(); w.ResponseWriter.WriteHeaderNow() }

func (w *unsafeWriter) Write(b []byte) (int, error) {
	w.header()
	return w.ResponseWriter.Write(b)
}

func (w *unsafeWriter) WriteString(s string) (int, error) {
	w.header()
	return w.ResponseWriter.WriteString(s)
}

func (w *unsafeWriter) Flush() { w.header(); w.ResponseWriter.Flush() }

func (w *unsafeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.done = true
	return w.ResponseWriter.Hijack()
}
