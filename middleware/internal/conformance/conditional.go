package conformance

import (
	"net/http"
	"testing"
)

// conditionalRows: conditional requests answered from the store (RFC 9110
// §13), in every configuration.
func conditionalRows() []rfcRow {
	zero := &Config{}
	var rows []rfcRow
	add := func(r ...rfcRow) { rows = append(rows, r...) }
	for _, cfg := range []struct {
		name string
		c    *Config
	}{{"strict", nil}, {"zero Config", zero}} {
		etag := always(200, "a", "Cache-Control", "max-age=3600", "ETag", `"v1"`, "Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT")
		notModified := []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Content-Type", absent}
		add(
			rfcRow{"RFC 9110 §13.1.2", cfg.name + ": If-None-Match matches: 304 from the store", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-None-Match", `"v1"`}, status: 304, body: text(""), want: notModified, origin: 1}}},
			rfcRow{"RFC 9110 §8.8.3.2", cfg.name + ": If-None-Match compares weakly", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-None-Match", `W/"v1"`}, status: 304, origin: 1}}},
			rfcRow{"RFC 9110 §13.1.2", cfg.name + ": If-None-Match list", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-None-Match", `"x", "v1"`}, status: 304, origin: 1}}},
			rfcRow{"RFC 9110 §13.1.2", cfg.name + ": If-None-Match *", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-None-Match", `*`}, status: 304, origin: 1}}},
			rfcRow{"RFC 9110 §13.1.2", cfg.name + ": If-None-Match other tag: the stored 200", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-None-Match", `"v2"`}, body: text("a"), origin: 1}}},
			rfcRow{"RFC 9110 §13.1.3", cfg.name + ": If-Modified-Since not modified", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-Modified-Since", "Tue, 01 Sep 2026 10:00:00 GMT"}, status: 304, origin: 1}}},
			rfcRow{"RFC 9110 §13.1.3", cfg.name + ": If-Modified-Since modified since", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-Modified-Since", "Mon, 31 Aug 2026 10:00:00 GMT"}, body: text("a"), origin: 1}}},
			rfcRow{"RFC 9110 §13.1.3", cfg.name + ": If-Modified-Since ignored beside If-None-Match", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-None-Match", `"v2"`, "If-Modified-Since", "Tue, 01 Sep 2026 10:00:00 GMT"}, body: text("a"), origin: 1}}},
			rfcRow{"RFC 9110 §13.1.1", cfg.name + ": If-Match fails: 412", cfg.c, etag,
				[]step{{origin: 1}, {header: []string{"If-Match", `"v2"`}, status: 412, origin: 1}}},
			rfcRow{"RFC 9110 §13.2.1", cfg.name + ": a client's preconditions never reach the fill", cfg.c, etag,
				[]step{{header: []string{"If-None-Match", `"v1"`, "If-Modified-Since", "Tue, 01 Sep 2026 10:00:00 GMT"}, status: 304, origin: 1,
					check: func(t *testing.T, _ *http.Response, seen []*http.Request) {
						for _, name := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"} {
							if v := seen[0].Header.Get(name); v != "" {
								t.Errorf("the origin saw %s: %s on the fill", name, v)
							}
						}
					}},
					{body: text("a"), origin: 1}}},
		)
	}
	return rows
}
