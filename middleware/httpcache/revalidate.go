package httpcache

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// Revalidation (RFC 9111 §4.3). When the guard refreshes an entry (a stale
// one, or one kept past its freshness to be revalidated), the load sees the
// stored response (guard.Previous). A vary record is kept as it is: the
// variants check their names themselves. A response with a validator is
// asked for conditionally: the handler's 304 freshens the stored response,
// its fields replacing the stored ones (§4.3.4), and only the new head goes
// to Redis: the body stays where it is (guard.Revalidated).

// recordWindows are the windows of a vary record whose first variant has
// windows w: the variant's, so that a record lives no longer than what it
// selects (a stream of URLs that vary leaves no record behind for a day),
// and refreshed for free (no handler call) while it is used, with the
// Group's windows (the zero w).
func recordWindows(w guard.Windows) guard.Windows {
	r := guard.Windows{Fresh: max(w.Fresh, 0), Stale: max(w.Stale, 0), MustRevalidate: true}
	if w.Stale == guard.Disabled {
		r.Stale = guard.Disabled
	}
	return r
}

// previous returns the stored response a load refreshes, when it has a
// validator to ask the handler with; rec reports a vary record (kept as is).
func (c *call) previous(ctx context.Context) (old *storedResponse, rec bool) {
	prev, ok := guard.Previous(ctx)
	if !ok {
		return nil, false
	}
	if isRecord(prev) {
		return nil, c.vary == nil
	}
	sr, err := decodeResponse(prev)
	if err != nil || (sr.get("Etag") == nil && sr.get("Last-Modified") == nil) {
		return nil, false
	}
	return &sr, false
}

// askConditionally adds old's validators to the request that refreshes it.
func askConditionally(h http.Header, old *storedResponse) {
	if v := old.get("Etag"); len(v) > 0 {
		h["If-None-Match"] = v[:1]
	}
	if v := old.get("Last-Modified"); len(v) > 0 {
		h["If-Modified-Since"] = v[:1]
	}
}

// keepRecord refreshes a vary record without calling the handler.
func keepRecord(ctx context.Context) ([]byte, error) {
	if err := guard.SetWindows(ctx, recordWindows(guard.Windows{})); err != nil {
		return nil, err
	}
	return nil, guard.Revalidated(nil, 0)
}

// revalidated merges the handler's 304 into old (§4.3.4) and answers the
// guard with the new head; old's body is not sent again.
func (c *call) revalidated(ctx context.Context, cw *capture, old *storedResponse, sent time.Time) ([]byte, error) {
	h := updatedHeader(old.header(), cw.snap, c.e.storeCookies)
	cc, targeted := c.e.responseCC(h)
	f := responseFreshness(h, cc, targeted, sent, cw.received)
	f.status = old.status
	p := c.e.place(f)
	names, star := c.e.varyNames(h)
	if p.reason == "" && (!c.e.shareable(old.status, h) || star || (c.vary != nil && !slices.Equal(names, c.vary)) || (c.vary == nil && len(names) > 0)) {
		p.reason = "revalidated response not shareable"
	}
	if p.reason != "" {
		// The stored response may no longer be served (the 304 made it
		// private, say): drop it. The caller gets the response the 304
		// confirmed, with its new fields; nobody else does.
		_ = c.e.g.Invalidate(ctx, c.key)
		full := &capture{c: c, snap: h, status: old.status, wroteHeader: true, buf: old.body, flushedAt: -1}
		return c.pass(full, p.reason)
	}
	if err := guard.SetWindows(ctx, p.windows()); err != nil {
		return nil, guard.Private(&notShared{reason: "windows"})
	}
	return nil, guard.Revalidated(encodeHead(old.status, int64(f.initialAge/time.Second), h, len(old.body)), old.headLen)
}

// updatedHeader is stored updated by the fields of a 304 (RFC 9111 §3.2):
// each replaces the stored field of its name, except the fields never
// stored and Content-Length (the body is the stored one).
func updatedHeader(stored, fresh http.Header, cookies bool) http.Header {
	h := stored // a copy already (storedResponse.header)
	var conn []string
	for _, v := range fresh["Connection"] {
		conn = append(conn, strings.Split(v, ",")...)
	}
	for k, v := range fresh {
		if k == "Content-Length" || k == "Content-Range" || (k == "Set-Cookie" && !cookies) || !storedHeader(k, conn) || len(v) == 0 {
			continue
		}
		h[k] = v
	}
	return h
}

// selects reports whether a 304 with fields fresh may update the stored
// response old (RFC 9111 §4.3.4): its entity tag, if it has one, must be
// old's (strongly equal for a strong tag, equal as opaque tags for a weak
// one); without one, its Last-Modified, if any, must be old's. A 304 with
// neither answers the request made with old's validators alone, and
// selects old (RFC 9110 §15.4.5 does not have a 304 repeat Last-Modified).
func selects(fresh http.Header, old *storedResponse) bool {
	if tag := first(fresh["Etag"]); tag != "" {
		stored := first(old.get("Etag"))
		newTag, newWeak, ok1 := parseETag(tag)
		oldTag, oldWeak, ok2 := parseETag(stored)
		if !ok1 || !ok2 || newTag != oldTag {
			return false
		}
		return newWeak || !oldWeak // a strong tag selects only a strong one
	}
	if lm := first(fresh["Last-Modified"]); lm != "" {
		return lm == first(old.get("Last-Modified"))
	}
	return true
}
