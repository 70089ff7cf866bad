package conformance

import (
	"net/http"
	"testing"
)

// revalidationRows: revalidation (§4.3).
func revalidationRows() []rfcRow {
	return []rfcRow{
		{"§4.3.1", "a stale response with an ETag is revalidated with If-None-Match; the 304 freshens it", nil,
			byCount(reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600"}, "body one"},
				reply{304, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600"}, ""}),
			[]step{{body: text("body one"), origin: 1},
				{body: text("body one"), origin: 2, check: wantConditional(1, "If-None-Match", `"v1"`)},
				{body: text("body one"), origin: 2, want: hit}}},
		{"§4.3.4", "the 304's fields replace the stored ones; the body stays", nil,
			byCount(reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600", "X-Version", "1", "Content-Type", "text/plain"}, "body one"},
				reply{304, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "X-Version", "2"}, ""}),
			[]step{{origin: 1}, {origin: 2},
				{body: text("body one"), origin: 2, want: []string{"X-Version", "2", "Content-Type", "text/plain", "Content-Length", "8"}}}},
		{"§4.3.4", "a 304 that makes the response private: the stored one is served no more", nil,
			func(n int, r *http.Request) reply {
				switch {
				case n == 1:
					return reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600, stale-while-revalidate=600", "Age", "3600"}, "body one"}
				case r.Header.Get("If-None-Match") != "":
					return reply{304, []string{"ETag", `"v1"`, "Cache-Control", "private, max-age=3600"}, ""}
				}
				return reply{200, []string{"ETag", `"v2"`, "Cache-Control", "max-age=3600"}, "body two"}
			},
			// Once the 304 said private, the stored response is gone: the
			// next request asks the origin unconditionally.
			[]step{{origin: 1}, {body: text("body one"), origin: 2, eventually: true},
				{body: text("body two"), origin: -1, until: true}}},
		{"§4.3.1", "Last-Modified: revalidated with If-Modified-Since", nil,
			byCount(reply{200, []string{"Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT", "Cache-Control", "max-age=3600", "Age", "3600"}, "b"},
				reply{304, []string{"Cache-Control", "max-age=3600"}, ""}),
			[]step{{origin: 1}, {body: text("b"), origin: 2, check: wantConditional(1, "If-Modified-Since", "Tue, 01 Sep 2026 10:00:00 GMT")},
				{origin: 2, want: hit}}},
		{"§4.3.3", "a 200 to the revalidation replaces the stored response", nil,
			byCount(reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600"}, "old"},
				reply{200, []string{"ETag", `"v2"`, "Cache-Control", "max-age=3600"}, "new"}),
			[]step{{body: text("old"), origin: 1}, {body: text("new"), origin: 2}, {body: text("new"), origin: 2, want: hit}}},
		{"§4.3.1", "no validator: no conditional request", nil,
			byCount(reply{200, []string{"Cache-Control", "max-age=1, stale-while-revalidate=600", "Age", "1"}, "a"}),
			[]step{{origin: 1}, {origin: 2, eventually: true, check: func(t *testing.T, _ *http.Response, seen []*http.Request) {
				if len(seen) > 1 && seen[1].Header.Get("If-None-Match") != "" {
					t.Error("a conditional request without a validator")
				}
			}}}},
	}
}

// mustRevalidateRows: never served stale without revalidation.
func mustRevalidateRows() []rfcRow {
	return []rfcRow{
		{"§5.2.2.2", "must-revalidate: not served stale, even within stale-while-revalidate", nil,
			validated(`"v1"`, "a", "Cache-Control", "max-age=3600, must-revalidate, stale-while-revalidate=600", "Age", "3600"),
			[]step{{origin: 1}, {body: text("a"), origin: 2, check: wantConditional(1, "If-None-Match", `"v1"`)}}},
		{"§5.2.2.8", "proxy-revalidate: not served stale by a shared cache", nil,
			validated(`"v1"`, "a", "Cache-Control", "max-age=3600, proxy-revalidate, stale-while-revalidate=600", "Age", "3600"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§5.2.2.10", "s-maxage: not served stale by a shared cache", nil,
			validated(`"v1"`, "a", "Cache-Control", "s-maxage=10, stale-while-revalidate=600", "Age", "20"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§5.2.2.4", "no-cache: stored, revalidated before each use", nil,
			validated(`"v1"`, "a", "Cache-Control", "no-cache"),
			[]step{{body: text("a"), origin: 1},
				{body: text("a"), origin: 2, check: wantConditional(1, "If-None-Match", `"v1"`)},
				{body: text("a"), origin: 3, check: wantConditional(2, "If-None-Match", `"v1"`)}}},
		{"§5.2.2.4", "no-cache without a validator: not stored", nil, always(200, "a", "Cache-Control", "no-cache, max-age=3600"),
			[]step{{origin: 1}, {origin: 2}}},
		{"RFC 5861 §3", "stale-while-revalidate: served stale, revalidated in the background", nil,
			validated(`"v1"`, "a", "Cache-Control", "max-age=1, stale-while-revalidate=600", "Age", "2"),
			[]step{{origin: 1}, {body: text("a"), want: []string{"Cache-Status", "stampede; fwd=stale"}, origin: 2, eventually: true}}},
	}
}
