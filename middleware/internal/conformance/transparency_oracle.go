package conformance

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// tAnswer is what a client saw of one response.
type tAnswer struct {
	err    bool // the exchange or the body broke off
	status int
	header http.Header
	body   string
	cache  string // Cache-Status
}

// ignored are the fields the comparison leaves out: those a cache sets
// (Age, Cache-Status), the date of sending, the framing, and hop-by-hop
// fields, which a cache does not forward (RFC 9110 §7.6.1).
var ignored = map[string]bool{
	"Age": true, "Cache-Status": true, "Date": true, "Content-Length": true,
	"Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Upgrade": true,
}

func (a tAnswer) String() string {
	if a.err {
		return "broken response"
	}
	body := a.body
	if len(body) > 40 {
		body = body[:40] + "..."
	}
	return fmt.Sprintf("%d %d bytes %q %v", a.status, len(a.body), body, a.header)
}

// same reports whether a and b are the same response, as far as the
// property compares them.
func same(a, b tAnswer) bool {
	if a.err || b.err {
		return a.err == b.err
	}
	return a.status == b.status && a.body == b.body && sameHeader(a.header, b.header)
}

func sameHeader(a, b http.Header) bool {
	// The fields a Connection field names are hop-by-hop: a cache drops
	// them (RFC 9110 §7.6.1), net/http replaces the handler's Connection
	// with its own. Named on either side, they are not compared.
	hop := map[string]bool{}
	for _, h := range []http.Header{a, b} {
		for _, v := range append(h["Connection"], h[tConnectionHeader]...) {
			for f := range strings.SplitSeq(v, ",") {
				hop[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
			}
		}
	}
	keep := func(h http.Header) map[string][]string {
		m := map[string][]string{}
		for k, v := range h {
			if !ignored[k] && !hop[k] && k != tConnectionHeader {
				m[k] = v
			}
		}
		return m
	}
	ka, kb := keep(a), keep(b)
	if len(ka) != len(kb) {
		return false
	}
	for k, v := range ka {
		if !slices.Equal(v, kb[k]) {
			return false
		}
	}
	return true
}

// shareable is the test's own judgement of a response of the default
// Config: what the package docs say is shared (and RFC 9111 allows).
// status is the status the client saw straight: a framework may send
// another than the handler asked for (echo sends 200 after a 1xx).
// answering is resp as it answers a request whose If-None-Match holds
// inm: when it answers conditionally, it returns after its fields and
// status, before its length, body and ending (a panic, an abort), so
// that what it sent, a 304 or whatever status a framework let through
// instead (echo sends the 103 it was given first as the final status,
// and drops the 304), is judged without them.
func (resp tResponse) answering(inm string) tResponse {
	if !resp.Conditional || inm != tETag {
		return resp
	}
	resp.Length, resp.Pieces, resp.End, resp.Twice, resp.Flush = "", nil, "", false, false
	return resp
}

func (resp tResponse) shareable(maxBody, status int) bool {
	if resp.End != "" || !slices.Contains([]int{200, 203, 204, 300, 301, 308, 404, 405, 410, 414}, status) {
		return false
	}
	// 204 and 304 have no body: net/http drops what the handler writes and
	// the Content-Length it declares.
	if body := resp.body(); status != 204 && status != 304 &&
		(resp.Length == "short" || (resp.Length == "long" && len(body) > 0) || len(body) > maxBody) {
		return false
	}
	counts := map[string]int{}
	for _, f := range resp.Header {
		name, v := http.CanonicalHeaderKey(f[0]), strings.ToLower(f[1])
		counts[name]++
		switch {
		case !validToken(f[0]) || strings.ContainsAny(f[1], "\r\n\x00"):
			return false // not readable back exactly
		case name == "Set-Cookie":
			return false
		case name == "Cache-Control" && (strings.Contains(v, "private") || strings.Contains(v, "no-store") || strings.Contains(v, "no-cache")):
			return false
		case name == "Vary" && strings.Contains(v, "*"):
			return false
		case name == "Content-Type" && strings.Contains(v, "text/event-stream"):
			return false
		}
	}
	for _, n := range counts {
		if n > 1024 {
			return false
		}
	}
	return true
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// fromCache reports an answer served from the cache (or by another
// request's handler call, or stored by this one's).
func fromCache(cs string) bool {
	return cs == "stampede; hit" || cs == "stampede; fwd=stale" ||
		cs == "stampede; fwd=miss; collapsed" || cs == "stampede; fwd=miss; stored" ||
		cs == "stampede; fwd=miss; detail=pass"
}

// acceptable reports whether got, r's answer through the middleware, is
// a right one, where want is r's answer straight.
func (h *tHarness) acceptable(tc TCase, r tRequest, got, want tAnswer, full, reval map[bool]tAnswer) bool {
	if same(got, want) {
		return true
	}
	if conditional(r) && same(got, full[r.Trigger]) {
		// The cache asks the handler unconditionally (a client's
		// preconditions are answered from the stored response): a
		// full response is a right answer to a conditional request.
		return true
	}
	if !got.err && fromCache(got.cache) && h.servable(tc, r, got, full, reval) {
		return true
	}
	if resp := tc.Behaviour.of(r); resp.panics() && (got.err || (!fromCache(got.cache) && resp.abortedWhole(got))) {
		// The handler panicked: its response is broken, though
		// net/http, which drops what it still buffers, sometimes
		// delivers all of it anyway (a body it had already passed on
		// whole). Either is right; a truncation passed off as whole
		// is not.
		return true
	}
	return false
}

// servable reports whether got, served from the cache to r, is a
// shareable response of the behaviour with r's preconditions applied.
func (h *tHarness) servable(tc TCase, r tRequest, got tAnswer, full, reval map[bool]tAnswer) bool {
	for _, trig := range []bool{false, true} {
		resp := tc.Behaviour.of(tRequest{Trigger: trig})
		for i, stored := range []tAnswer{full[trig], reval[trig]} {
			judged := resp
			if i == 1 {
				judged = resp.answering(tETag)
			}
			if stored.err || stored.status == http.StatusNotModified || !judged.shareable(tc.MaxBody, stored.status) {
				continue
			}
			for _, f := range revalidated(stored, reval, tc.Behaviour) {
				if matches(r, got, f) {
					return true
				}
			}
		}
	}
	return false
}

// revalidated returns f, and f as each revalidation may update it: a
// refresh asks the handler with f's validators, for whichever request
// started it, and a 304 (reval holds the handler's answers to that
// request) selects f when its entity tag, if any, weakly matches f's (RFC
// 9111 §4.3.4); its fields then replace f's, but those a cache never
// stores. The cache reads the 304 as the handler wrote it, so a
// Content-Type the handler set on it, which net/http drops on the wire
// (reval does not show it), updates f too.
func revalidated(f tAnswer, reval map[bool]tAnswer, b tBehaviour) []tAnswer {
	out := []tAnswer{f}
	for trig, nm := range reval {
		if nm.err || nm.status != http.StatusNotModified {
			continue
		}
		if tag := nm.header.Get("Etag"); tag != "" && strings.TrimPrefix(tag, "W/") != strings.TrimPrefix(f.header.Get("Etag"), "W/") {
			continue // selects nothing: asked again, unconditionally
		}
		u := f
		u.header = f.header.Clone()
		for k, v := range nm.header {
			if !ignored[k] && k != "Set-Cookie" && k != tConnectionHeader {
				u.header[k] = v
			}
		}
		var ct []string
		for _, fl := range b.of(tRequest{Trigger: trig}).Header {
			if fl[0] == "Content-Type" {
				ct = append(ct, fl[1])
			}
		}
		if ct != nil {
			u.header["Content-Type"] = ct
		}
		out = append(out, u)
	}
	return out
}

// matches reports whether got is f served to r from the cache.
func matches(r tRequest, got, f tAnswer) bool {
	if r.Range && f.status == http.StatusOK {
		// bytes=0-3 from a stored 200 (RFC 9110 §14): its first four
		// bytes as a 206, or the whole response; net/http's ServeContent
		// adds Accept-Ranges.
		switch {
		case got.status == http.StatusPartialContent:
			return len(f.body) > 0 && got.body == f.body[:min(4, len(f.body))] && got.header.Get("Content-Range") != ""
		case got.status == http.StatusRequestedRangeNotSatisfiable:
			return f.body == ""
		case got.status == http.StatusOK:
			return got.body == f.body
		}
	}
	switch want := precondition(r, f); {
	case r.Method == http.MethodHead:
		return got.status == f.status && got.body == "" && sameHeader(got.header, f.header)
	case same(got, f):
		// The full response: right for any request, a conditional one
		// included.
		return true
	case want != 0:
		return got.status == want && got.body == ""
	}
	return false
}

func conditional(r tRequest) bool { return r.INM != "" || r.IMS }

// precondition is the status r's preconditions make of the stored full
// answer f (RFC 9110 §13.2.2), or 0.
func precondition(r tRequest, f tAnswer) int {
	if f.status < 200 || f.status > 299 {
		return 0
	}
	etag := f.header.Get("Etag")
	switch {
	case r.INM == "*":
		return http.StatusNotModified
	case r.INM != "":
		if etag != "" && strings.TrimPrefix(r.INM, "W/") == strings.TrimPrefix(etag, "W/") {
			return http.StatusNotModified
		}
		return 0
	case r.IMS:
		lm := f.header.Get("Last-Modified")
		if lm == "" {
			lm = f.header.Get("Date")
		}
		if t, err := http.ParseTime(lm); err == nil && !t.After(time.Date(2029, 1, 2, 0, 0, 0, 0, time.UTC)) {
			return http.StatusNotModified
		}
	}
	return 0
}
