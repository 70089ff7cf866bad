package httpcache

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// Range requests (RFC 9110 §14). A GET with Range is answered from a
// stored complete 200 when there is one: one range as a 206 with its
// Content-Range, several as multipart/byteranges, an unsatisfiable one as
// a 416 with Content-Range "bytes */length", and an If-Range that does not
// match (a strong entity tag, or the exact Last-Modified date) as the
// whole 200. The answer is built by net/http's ServeContent, which holds
// those rules. With nothing stored, the request goes to the handler as it
// is, and its answer, partial, is never stored: a cache stores only
// complete responses (§3.3), and a range request does not fill the entry.
func (e *engine) serveRange(w http.ResponseWriter, r *http.Request, key string, direct func() error, h Handler) error {
	sr, res, ok := e.stored(r, key)
	if !ok || sr.status != http.StatusOK {
		w.Header().Set("Cache-Status", cachestatus.Bypass+`; detail="range"`)
		return runDirect(direct, h, w, r)
	}
	dst := w.Header()
	for _, f := range sr.fields {
		dst[f.name] = f.vals
	}
	e.dropTargeted(dst)
	noSniff(dst)
	dst["Age"] = sr.ageField(min(sr.initialAge+int64(res.Age/time.Second), maxDelta))
	dst["Cache-Status"] = followCacheStatus(dst["Cache-Status"], cachestatus.Of(res.Status))
	var mod time.Time
	if lm, ok := httpDate(sr.get("Last-Modified")); ok {
		mod = lm
	}
	if !validRanges(r.Header["Range"]) {
		// Another unit, or not a range set: ignored (§14.2), the whole
		// response is the answer.
		r = r.Clone(r.Context())
		r.Header.Del("Range")
	}
	// The client's preconditions were answered by ServeContent's own
	// rules (RFC 9110 §13.2.2), as write answers them for a full GET.
	http.ServeContent(w, r, "", mod, bytes.NewReader(sr.body))
	return nil
}

// maxRanges is the most ranges one request is answered with: a field of
// thousands of small ranges would turn a stored response into a
// multipart answer many times its size, its part headers paid for by
// nobody (RFC 9110 §14.2 lets a server ignore such a field).
const maxRanges = 32

// validRanges reports a Range field that is one "bytes" range set by RFC
// 9110 §14.1.1's grammar: ranges "first-last", "first-" or "-suffix",
// digits only, first not above last, separated by commas, at most
// maxRanges of them.
func validRanges(vals []string) bool {
	if len(vals) != 1 {
		return false
	}
	set, ok := strings.CutPrefix(vals[0], "bytes=")
	if !ok || strings.TrimSpace(set) == "" || strings.Count(set, ",") >= maxRanges {
		return false
	}
	for r := range strings.SplitSeq(set, ",") {
		r = strings.Trim(r, " \t")
		first, last, ok := strings.Cut(r, "-")
		switch {
		case !ok || (first == "" && last == ""):
			return false
		case first != "" && !isDigits(first), last != "" && !isDigits(last):
			return false
		case first != "" && last != "" && len(first) <= 18 && len(last) <= 18:
			a, _ := strconv.ParseInt(first, 10, 64)
			b, _ := strconv.ParseInt(last, 10, 64)
			if a > b {
				return false
			}
		}
	}
	return true
}
