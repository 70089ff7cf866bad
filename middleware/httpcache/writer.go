package httpcache

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/middleware/cachestatus"
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
	// framed: declared frames the body (net/http sends it), rather than a
	// Transfer-Encoding the handler set too, with which net/http drops the
	// field but still fails a Write past it.
	framed bool
	// sniffAt is how many body bytes were written at the first Flush, -1
	// before it: net/http sniffs a missing Content-Type from what it sends
	// first, so this response's type is read from as many.
	sniffAt int
	// flushedAt is how many body bytes were written at the last Flush, -1
	// before any: what a client would have received of a response whose
	// handler then panicked.
	flushedAt int
	written   int64 // body bytes written, refused ones included (as net/http counts)
	accepted  int64 // body bytes taken
	hijacked  bool  // the handler took the client's connection
}

func (cw *capture) Header() http.Header { return cw.header }

func (cw *capture) WriteHeader(code int) {
	if cw.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		// As net/http's WriteHeader: a status it cannot send is the
		// handler's bug, not a 200.
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		cw.interim(code)
		return
	}
	cw.wroteHeader, cw.status, cw.received = true, code, time.Now()
	cw.snap = canonical(cw.header)
	if v := cw.snap["Content-Length"]; len(v) > 0 {
		// net/http reads the first value as strconv does and holds the
		// body to it. A value it cannot read it ignores, but may still send
		// (its copy of the header keeps it): such a response is its
		// request's alone, written by net/http as it would have.
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err == nil && n >= 0 {
			cw.declared = n
			te := cw.snap.Get("Transfer-Encoding")
			cw.framed = te == "" || te == "identity"
		}
		if err != nil || n < 0 || strings.TrimLeft(v[0], "0123456789") != "" {
			// Not 1*DIGIT (RFC 9110 §8.6): "+3" net/http reads, and sends.
			cw.unshare("invalid Content-Length")
		}
		for _, o := range v[1:] {
			if o != v[0] {
				cw.unshare("conflicting Content-Length")
			}
		}
	}
	if code == http.StatusNotModified && cw.revalidating {
		return
	}
	if code == http.StatusSwitchingProtocols {
		// A final response net/http sends as it is (RFC 9110 §15.2.2: the
		// handler's own switch), never stored: 1xx are not final to a
		// cache (RFC 9111 §3).
		cw.unshare("switching protocols")
		return
	}
	if !cw.c.e.shareable(code, cw.snap) {
		cw.unshare("response not shareable")
	}
}

// interim relays an informational response (103 Early Hints, say) to the
// client whose request the load answers, when it still waits, with the
// fields set so far, as net/http sends them: straight to the writer under
// the framework's, which may take a 1xx for the final status (echo). It is
// never stored, nor replayed to anyone else. 101 is not relayed: a
// protocol switch is the handler's to make on its own request (Upgrade
// requests are not shared).
func (cw *capture) interim(code int) {
	if code == http.StatusSwitchingProtocols || code < 100 {
		return
	}
	c := cw.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		return
	}
	w := c.w
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	// The 1xx's fields go with it only: the final response's are its own
	// (a reverse proxy clears them after relaying a 1xx, as net/http does
	// not).
	dst := w.Header()
	saved := dst.Clone()
	for k, v := range cw.header {
		dst[k] = v
	}
	w.WriteHeader(code)
	clear(dst)
	for k, v := range saved {
		dst[k] = v
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
		cw.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(cw.status) {
		return 0, http.ErrBodyNotAllowed // as net/http: the bytes go nowhere
	}
	cw.written += int64(len(p))
	if cw.declared >= 0 && cw.written > cw.declared {
		return 0, http.ErrContentLength // as net/http: the whole Write
	}
	cw.accepted += int64(len(p))
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
	if cw.sniffAt < 0 {
		cw.sniffAt = len(cw.buf)
	}
	cw.flushedAt = len(cw.buf)
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
	case cw.status >= 500 && !cw.c.e.shareable(cw.status, cw.snap):
		// (A 5xx its origin marked storable is an answer, not a failure.)
		return "server error"
	case cw.framed && cw.accepted < cw.declared && bodyAllowed(cw.status):
		return "incomplete body"
	}
	return ""
}

// bodyAllowed reports whether a response of this status has a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// hasTrailers reports whether the handler declared trailer fields (in
// Trailer) or set any (named with http.TrailerPrefix): net/http sends them
// after the body, which a stored response does not keep.
func (cw *capture) hasTrailers() bool {
	if len(cw.snap["Trailer"]) > 0 {
		return true
	}
	for k := range cw.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// trailersTo sets on w the trailer fields the handler set, once w's body
// is written, as net/http reads them from the handler's header when the
// handler returns: the fields Trailer declared, and those named with
// http.TrailerPrefix. net/http sends them when it frames the response in
// chunks; so that it frames this one as it would have the handler's, a
// handler that flushed is flushed for here too.
func (cw *capture) trailersTo(w http.ResponseWriter) {
	if !cw.hasTrailers() {
		return
	}
	if cw.sniffAt >= 0 && !cw.streaming {
		_ = http.NewResponseController(w).Flush()
	}
	dst := w.Header()
	for _, v := range cw.snap["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if vals, ok := cw.header[name]; ok {
				dst[name] = vals
			}
		}
	}
	for k, v := range cw.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			dst[k] = v
		}
	}
}

// sniff sets the Content-Type net/http would have sent with the response,
// when the handler set none (net/http's chunkWriter rules: from the first
// bytes it sends, up to 512; none for a bodyless status, a response with a
// Transfer-Encoding, or one flushed before any byte).
func (cw *capture) sniff() {
	n := len(cw.buf)
	if cw.sniffAt >= 0 {
		n = cw.sniffAt
	}
	_, have := cw.snap["Content-Type"]
	if have || n == 0 || len(cw.snap["Transfer-Encoding"]) > 0 || !bodyAllowed(cw.status) {
		return
	}
	cw.snap["Content-Type"] = []string{http.DetectContentType(cw.buf[:min(n, 512)])}
}

// hold hands the unshared response to the call, for its caller if the
// guard's answer shows the load was the caller's; why goes in its
// Cache-Status.
func (cw *capture) hold(why string) {
	cw.why = why
	if cw.streaming {
		return
	}
	cw.sniff()
	c := cw.c
	c.mu.Lock()
	c.held = cw
	c.mu.Unlock()
}

func (cw *capture) writeHeader(w http.ResponseWriter) {
	if cw.sniffAt >= 0 {
		// Flushed before: net/http sniffed from what it sent then.
		cw.sniff()
	}
	dst := w.Header()
	for k, v := range cw.snap {
		dst[k] = v
	}
	if !cw.streaming || cw.sniffAt >= 0 {
		noSniff(dst)
	}
	cw.c.e.dropTargeted(dst)
	dst["Cache-Status"] = followCacheStatus(cw.snap["Cache-Status"], cachestatus.NotStored(cw.why))
	w.WriteHeader(cw.status)
}

// noSniff keeps net/http from sniffing a Content-Type the response would
// not have had (see capture.sniff): a nil value suppresses the field.
func noSniff(h http.Header) {
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
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
	cw.trailersTo(w)
}

// writeFlushed writes to w what a client would have received of a held
// response whose handler panicked: what the handler flushed, if anything.
func (cw *capture) writeFlushed(w http.ResponseWriter, body bool) {
	if cw.flushedAt < 0 {
		return
	}
	cw.writeHeader(w)
	if body && cw.flushedAt > 0 {
		_, _ = w.Write(cw.buf[:cw.flushedAt])
	}
	_ = http.NewResponseController(w).Flush()
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
