package httpcache

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/internal/cachestatus"
)

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
	received    time.Time // when the status line arrived (RFC 9111 §4.2.3 response_time)
	// revalidating: the request carried the stored response's validators,
	// so a 304 is the answer to merge, not a response to refuse.
	revalidating bool
	declared     int64 // the Content-Length the handler set, -1 if none
	written      int64 // body bytes written
	hijacked     bool  // the handler took the client's connection
}

func (cw *capture) Header() http.Header { return cw.header }

func (cw *capture) WriteHeader(code int) {
	if cw.wroteHeader || code < 200 {
		return // informational responses are not forwarded
	}
	cw.wroteHeader, cw.status, cw.received = true, code, time.Now()
	cw.snap = canonical(cw.header)
	if v := cw.snap["Content-Length"]; len(v) == 1 {
		if n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64); err == nil && n >= 0 {
			cw.declared = n
		}
	}
	if code == http.StatusNotModified && cw.revalidating {
		return
	}
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
	cw.written += int64(len(p))
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

// failure says why a complete response is a failure of its request, or
// "": a server error, or a body that does not match the Content-Length
// the handler declared (a relayed upstream that broke off, say: RFC 9111
// §3.3 never lets an incomplete response pass for a complete one).
func (cw *capture) failure() string {
	switch {
	case cw.status >= 500:
		return "server error"
	case cw.declared >= 0 && cw.written != cw.declared && bodyAllowed(cw.status):
		return "incomplete body"
	}
	return ""
}

// bodyAllowed reports whether a response of this status has a body.
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// hold hands the unshared response to the call, for its caller if the
// guard's answer shows the load was the caller's; why goes in its
// Cache-Status.
func (cw *capture) hold(why string) {
	cw.why = why
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
	dst["Cache-Status"] = []string{cachestatus.NotStored(cw.why)}
	w.WriteHeader(cw.status)
}

// Hijack hands the client's connection to the handler when the request
// still waits for its own response (the load answers it): the response is
// then the handler's alone. A background refresh has no connection to give.
func (cw *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		return nil, nil, http.ErrNotSupported
	}
	conn, brw, err := http.NewResponseController(c.w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	cw.hijacked, cw.streaming, c.streaming = true, true, true
	cw.unshared, cw.why = true, "hijacked"
	return conn, brw, nil
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
