package conformance

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// tBehaviour is what a generated handler does: Base, or Trigger for a
// request carrying the X-Trigger header (an input the key does not hold).
type tBehaviour struct {
	Base, Trigger tResponse
}

// tResponse is one response a generated handler writes.
type tResponse struct {
	Status  int         `json:"status"`
	Interim bool        `json:"interim,omitempty"` // a 103 Early Hints first
	Header  [][2]string `json:"header,omitempty"`  // added in order (w.Header().Add)
	// Pieces is the body, written in pieces; "~N" stands for N bytes of x.
	Pieces []string `json:"pieces,omitempty"`
	Flush  bool     `json:"flush,omitempty"` // Flush after each piece
	// Length is the Content-Length the handler declares: "" none,
	// "right", "short" (more than it writes), "long" (less than it writes).
	Length string `json:"length,omitempty"`
	// Twice: the Content-Length on two identical field lines.
	Twice bool `json:"twice,omitempty"`
	// End is how the handler ends: "" it returns, "panic", "abort"
	// (panic(http.ErrAbortHandler)), "hijack" (it takes the connection
	// and writes a raw response itself).
	End string `json:"end,omitempty"`
	// NotModified: the handler answers a matching If-None-Match with a
	// 304 carrying this entity tag ("" the response's own).
	Conditional bool   `json:"conditional,omitempty"`
	NotModified string `json:"not_modified,omitempty"`
}

// serve answers r as b says.
func (b tBehaviour) serve(w http.ResponseWriter, r *http.Request) {
	resp := b.Base
	if r.Header.Get("X-Trigger") != "" {
		resp = b.Trigger
	}
	resp.serve(w, r)
}

func (resp tResponse) serve(w http.ResponseWriter, r *http.Request) {
	if resp.End == "hijack" {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Raw: 1\r\nConnection: close\r\n\r\nhijacked")
		_ = brw.Flush()
		return
	}
	h := w.Header()
	if resp.Interim {
		h.Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
	}
	for _, f := range resp.Header {
		h[f[0]] = append(h[f[0]], f[1])
	}
	if resp.Conditional && slices.Contains(r.Header.Values("If-None-Match"), tETag) {
		if resp.NotModified != "" {
			h.Set("Etag", resp.NotModified)
		}
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := resp.body()
	switch resp.Length {
	case "right":
		h.Set("Content-Length", strconv.Itoa(len(body)))
	case "short":
		h.Set("Content-Length", strconv.Itoa(len(body)+10))
	case "long":
		if len(body) > 0 {
			h.Set("Content-Length", strconv.Itoa(len(body)-1))
		}
	}
	if v := h["Content-Length"]; resp.Twice && len(v) == 1 {
		h["Content-Length"] = []string{v[0], v[0]}
	}
	w.WriteHeader(resp.Status)
	for _, p := range resp.Pieces {
		_, _ = io.WriteString(w, piece(p))
		if resp.Flush {
			_ = http.NewResponseController(w).Flush()
		}
	}
	switch resp.End {
	case "panic":
		panic("generated panic")
	case "abort":
		panic(http.ErrAbortHandler)
	}
}

// tConnectionHeader carries, in an answer, the Connection field the
// handler set (net/http sends its own instead).
const tConnectionHeader = "X-Test-Handler-Connection"

// connection returns the handler's Connection field, joined.
func (resp tResponse) connection() string {
	var vs []string
	for _, f := range resp.Header {
		if http.CanonicalHeaderKey(f[0]) == "Connection" {
			vs = append(vs, f[1])
		}
	}
	return strings.Join(vs, ",")
}

// refetches is 1 when a revalidation of b may be answered by a 304 that
// selects nothing (another entity tag, or none), so the handler is asked
// again, else 0.
func (b tBehaviour) refetches() int {
	for _, resp := range []tResponse{b.Base, b.Trigger} {
		if resp.Status == http.StatusNotModified ||
			(resp.Conditional && resp.NotModified != "" && strings.TrimPrefix(resp.NotModified, "W/") != tETag) {
			return 1
		}
	}
	return 0
}

// of returns the response b gives r.
func (b tBehaviour) of(r tRequest) tResponse {
	if r.Trigger {
		return b.Trigger
	}
	return b.Base
}

// abortedWhole reports whether got is all of resp, a response whose
// handler panicked after writing the whole body it declared.
func (resp tResponse) abortedWhole(got tAnswer) bool {
	return resp.panics() && resp.Length == "right" && got.status == resp.Status && got.body == resp.body()
}

func (resp tResponse) panics() bool { return resp.End == "panic" || resp.End == "abort" }

// piece returns the bytes a piece stands for.
func piece(p string) string {
	if n, err := strconv.Atoi(strings.TrimPrefix(p, "~")); err == nil && strings.HasPrefix(p, "~") && n <= 1<<20 {
		return strings.Repeat("x", n)
	}
	return p
}

func (resp tResponse) body() string {
	var b strings.Builder
	for _, p := range resp.Pieces {
		b.WriteString(piece(p))
	}
	return b.String()
}
