package conformance

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// rangeRows: RFC 9110 §14, answered from a stored complete 200.
func rangeRows() []rfcRow {
	body := "0123456789"
	stored := func(kv ...string) originFunc {
		return func(_ int, r *http.Request) reply {
			if r.Header.Get("Range") != "" {
				return reply{206, []string{"Content-Range", "bytes 0-0/10"}, "0"}
			}
			return reply{200, append([]string{"Cache-Control", "max-age=3600", "ETag", `"r1"`, "Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT"}, kv...), body}
		}
	}
	rng := func(v string) []string { return []string{"Range", v} }
	// A longer body, for many small ranges (net/http ignores ranges
	// longer in all than the body).
	longBody := strings.Repeat(body, 10)
	long := func() originFunc {
		return func(int, *http.Request) reply { return reply{200, []string{"Cache-Control", "max-age=3600"}, longBody} }
	}
	ranges := func(n int) string {
		s := "bytes=0-0"
		for i := 1; i < n; i++ {
			s += fmt.Sprintf(",%d-%d", 10*(i%10), 10*(i%10))
		}
		return s
	}
	hit := "stampede; hit"
	var rows []rfcRow
	for _, c := range []struct {
		name string
		cfg  *Config
	}{{"strict", nil}, {"zero Config", &Config{}}} {
		rows = append(rows,
			rfcRow{"RFC 9110 §14.1.2", c.name + ": one range from the stored 200", c.cfg, stored(),
				[]step{{origin: 1}, {header: rng("bytes=2-4"), status: 206, body: text("234"), origin: 1,
					want: []string{"Content-Range", "bytes 2-4/10", "Cache-Status", hit}}}},
			rfcRow{"RFC 9110 §14.1.2", c.name + ": a suffix range", c.cfg, stored(),
				[]step{{origin: 1}, {header: rng("bytes=-3"), status: 206, body: text("789"), origin: 1, want: []string{"Content-Range", "bytes 7-9/10"}}}},
			rfcRow{"RFC 9110 §14.1.2", c.name + ": an open-ended range", c.cfg, stored(),
				[]step{{origin: 1}, {header: rng("bytes=8-"), status: 206, body: text("89"), origin: 1, want: []string{"Content-Range", "bytes 8-9/10"}}}},
			rfcRow{"RFC 9110 §14.6", c.name + ": several ranges as multipart/byteranges", c.cfg, stored(),
				[]step{{origin: 1}, {header: rng("bytes=0-1,5-6"), status: 206, origin: 1, check: wantMultipart("01", "56")}}},
			rfcRow{"RFC 9110 §15.5.17", c.name + ": an unsatisfiable range is a 416", c.cfg, stored(),
				[]step{{origin: 1}, {header: rng("bytes=20-30"), status: 416, origin: 1, want: []string{"Content-Range", "bytes */10"}}}},
			rfcRow{"RFC 9110 §13.1.5", c.name + ": If-Range with the entity tag: the range", c.cfg, stored(),
				[]step{{origin: 1}, {header: append(rng("bytes=0-1"), "If-Range", `"r1"`), status: 206, body: text("01"), origin: 1}}},
			rfcRow{"RFC 9110 §13.1.5", c.name + ": If-Range with another entity tag: the whole 200", c.cfg, stored(),
				[]step{{origin: 1}, {header: append(rng("bytes=0-1"), "If-Range", `"r0"`), status: 200, body: text(body), origin: 1}}},
			rfcRow{"RFC 9110 §13.1.5", c.name + ": If-Range with the Last-Modified date: the range", c.cfg, stored(),
				[]step{{origin: 1}, {header: append(rng("bytes=0-1"), "If-Range", "Tue, 01 Sep 2026 10:00:00 GMT"), status: 206, body: text("01"), origin: 1}}},
			rfcRow{"RFC 9111 §3.3", c.name + ": nothing stored: the handler answers the range, and its 206 is not stored", c.cfg, stored(),
				[]step{{header: rng("bytes=0-0"), status: 206, body: text("0"), origin: 1}, {body: text(body), origin: 2}}},
			rfcRow{"RFC 9110 §14.2", c.name + ": an invalid Range is ignored: the whole 200", c.cfg, stored(),
				[]step{{origin: 1}, {header: rng("lines=1-2"), status: 200, body: text(body), origin: 1}}},
			rfcRow{"RFC 9211 §2", c.name + ": a range from the store follows the upstream caches' Cache-Status", c.cfg, stored("Cache-Status", "edge; hit"),
				[]step{{origin: 1}, {header: rng("bytes=2-4"), status: 206, body: text("234"), origin: 1,
					want: []string{"Cache-Status", "edge; hit, stampede; hit"}}}},
			rfcRow{"RFC 9110 §14.2", c.name + ": more than 32 ranges are ignored: the whole 200", c.cfg, long(),
				[]step{{origin: 1}, {header: rng(ranges(33)), status: 200, body: text(longBody), origin: 1}}},
			rfcRow{"RFC 9110 §14.6", c.name + ": 32 ranges are answered", c.cfg, long(),
				[]step{{origin: 1}, {header: rng(ranges(32)), status: 206, origin: 1, check: wantMultipart(slices.Repeat([]string{"0"}, 32)...)}}},
		)
	}
	return rows
}

// wantMultipart checks a multipart/byteranges answer with these parts.
func wantMultipart(parts ...string) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, resp *http.Response, _ []*http.Request) {
		ct := resp.Header.Get("Content-Type")
		if !strings.HasPrefix(ct, "multipart/byteranges") {
			t.Errorf("Content-Type %q, want multipart/byteranges", ct)
		}
	}
}
