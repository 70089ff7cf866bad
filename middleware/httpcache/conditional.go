package httpcache

import (
	"net/http"
	"strings"
)

// conditionalHeaders are the request's preconditions (RFC 9110 §13.1). They
// are answered from the stored response and never reach the handler call
// that fills an entry: its response is stored for every client, so it must
// be the full one.
var conditionalHeaders = [...]string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range"}

func stripConditionals(h http.Header) {
	for _, name := range conditionalHeaders {
		delete(h, name)
	}
}

// precondition evaluates r's preconditions against a stored response (RFC
// 9110 §13.2.2, in its order): 0 to serve the response, 304 Not Modified
// or 412 Precondition Failed. Preconditions apply to a 2xx response only
// (§13.2.1).
func precondition(r *http.Request, sr *storedResponse) int {
	h := r.Header
	if sr.status < 200 || sr.status > 299 || !hasConditional(h) {
		return 0
	}
	etag := first(sr.get("Etag"))
	if vals := h["If-Match"]; len(vals) > 0 {
		if !matchAny(vals, etag, true) {
			return http.StatusPreconditionFailed
		}
	} else if since, ok := httpDate(h["If-Unmodified-Since"]); ok {
		if lm, ok := httpDate(sr.get("Last-Modified")); ok && lm.After(since) {
			return http.StatusPreconditionFailed
		}
	}
	if vals := h["If-None-Match"]; len(vals) > 0 {
		if matchAny(vals, etag, false) {
			return http.StatusNotModified
		}
	} else if since, ok := httpDate(h["If-Modified-Since"]); ok {
		// §4.3.2 of RFC 9111: without Last-Modified, the stored
		// response's Date stands in.
		lm, ok := httpDate(sr.get("Last-Modified"))
		if !ok {
			lm, ok = httpDate(sr.get("Date"))
		}
		if ok && !lm.After(since) {
			return http.StatusNotModified
		}
	}
	return 0
}

func hasConditional(h http.Header) bool {
	return len(h["If-Match"]) > 0 || len(h["If-None-Match"]) > 0 ||
		len(h["If-Modified-Since"]) > 0 || len(h["If-Unmodified-Since"]) > 0
}

func first(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return strings.TrimSpace(vals[0])
}

// matchAny reports whether the entity-tag list vals ("*" or tags, over one
// or more field lines) matches etag: strongly (both strong and equal) for
// If-Match, weakly (equal opaque tags) for If-None-Match (RFC 9110 §8.8.3.2).
// "*" matches any current representation.
func matchAny(vals []string, etag string, strong bool) bool {
	cur, curWeak, ok := parseETag(etag)
	for _, v := range vals {
		rest := v
		for {
			rest = strings.TrimLeft(rest, " \t,")
			if rest == "" {
				break
			}
			if rest[0] == '*' {
				return true
			}
			tag, weak, n := scanETag(rest)
			if n == 0 {
				break // malformed: the rest of this line is ignored
			}
			rest = rest[n:]
			if ok && tag == cur && (!strong || (!weak && !curWeak)) {
				return true
			}
		}
	}
	return false
}

// parseETag parses a stored ETag value.
func parseETag(s string) (opaque string, weak, ok bool) {
	tag, weak, n := scanETag(s)
	return tag, weak, n > 0 && strings.TrimSpace(s[n:]) == ""
}

// scanETag reads one entity-tag at the start of s: [W/] DQUOTE *etagc
// DQUOTE. n is the bytes read, 0 when s does not start with one.
func scanETag(s string) (opaque string, weak bool, n int) {
	if strings.HasPrefix(s, "W/") {
		weak, n = true, 2
	}
	if len(s) <= n || s[n] != '"' {
		return "", false, 0
	}
	end := strings.IndexByte(s[n+1:], '"')
	if end < 0 {
		return "", false, 0
	}
	for i := n + 1; i < n+1+end; i++ {
		if c := s[i]; c < 0x21 || c == 0x7f {
			return "", false, 0
		}
	}
	return s[n : n+end+2], weak, n + end + 2
}

// notModifiedFields are the fields of the stored response a 304 carries
// (RFC 9110 §15.4.5); Last-Modified only when there is no ETag.
var notModifiedFields = [...]string{"Cache-Control", "Content-Location", "Date", "Etag", "Expires", "Vary"}

// writeNotModified answers a conditional request from sr with a 304.
func writeNotModified(w http.ResponseWriter, sr *storedResponse, age []string, status string) {
	dst := w.Header()
	for _, name := range notModifiedFields {
		if v := sr.get(name); v != nil {
			dst[name] = v
		}
	}
	if sr.get("Etag") == nil {
		if v := sr.get("Last-Modified"); v != nil {
			dst["Last-Modified"] = v
		}
	}
	dst["Age"] = age
	dst["Cache-Status"] = statusField(status)
	w.WriteHeader(http.StatusNotModified)
}
