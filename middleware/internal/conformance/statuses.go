package conformance

import (
	"fmt"
	"net/http"
	"time"
)

// statusRows: RFC 9111 §3 (a response with explicit freshness is storable
// whatever its status, RFC 9110 §15.1), §4.2.2 (heuristic freshness),
// RFC 9213 (targeted fields) and Set-Cookie, in the strict and the zero
// Config.
func statusRows() []rfcRow {
	var rows []rfcRow
	zero := &Config{}
	hit := []string{"Cache-Status", "stampede; hit"}
	for _, status := range []int{302, 303, 307, 400, 403, 500, 503, 599} {
		rows = append(rows,
			rfcRow{"§3", fmt.Sprintf("strict: %d with max-age is stored", status), nil, always(status, "x", "Cache-Control", "max-age=3600", "Location", "/x"),
				[]step{{status: status, origin: 1}, {status: status, origin: 1, want: hit}}},
			rfcRow{"§3", fmt.Sprintf("zero Config: %d with max-age is not (Statuses)", status), zero, always(status, "x", "Cache-Control", "max-age=3600", "Location", "/x"),
				[]step{{status: status, origin: 1}, {status: status, origin: 2}}},
		)
	}
	rows = append(rows,
		rfcRow{"§3", "strict: a 500 with max-age and stale-if-error is served stale", nil,
			byCount(reply{500, []string{"Cache-Control", "max-age=1, stale-while-revalidate=600", "Age", "1"}, "first"}),
			[]step{{status: 500, origin: 1}, {status: 500, body: text("first"), origin: 2, eventually: true, want: []string{"Cache-Status", "stampede; fwd=stale"}}}},
		rfcRow{"§3", "strict: a 302 without freshness is not stored", nil, always(302, "", "Location", "/x"),
			[]step{{status: 302, origin: 1}, {status: 302, origin: 2}}},
	)
	// Heuristic freshness (§4.2.2), an option of UpstreamWindows.
	lm := func(age time.Duration, kv ...string) originFunc {
		return func(int, *http.Request) reply {
			return reply{200, append([]string{"Date", now(), "Last-Modified", ago(age)}, kv...), "h"}
		}
	}
	heur := &Config{UpstreamWindows: true, HeuristicFreshness: true}
	rows = append(rows,
		rfcRow{"§4.2.2", "heuristic: fresh for a tenth of the time since Last-Modified", heur, lm(10*time.Hour, "Age", "1800"),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§4.2.2", "heuristic: past a tenth of it, stale (revalidated)", heur, lm(10*time.Hour, "Age", "7200"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§4.2.2", "heuristic: not for a status that is not heuristically cacheable", heur,
			always(302, "h", "Date", now(), "Last-Modified", ago(10*time.Hour), "Location", "/x"),
			[]step{{status: 302, origin: 1}, {status: 302, origin: 2}}},
		rfcRow{"§4.2.2", "heuristic: off under RequireFreshness", &Config{UpstreamWindows: true, RequireFreshness: true, HeuristicFreshness: true}, lm(10 * time.Hour),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§4.2.2", "heuristic: never over no-cache", heur, always(200, "h", "Date", now(), "Last-Modified", ago(10*time.Hour), "Cache-Control", "no-cache"),
			[]step{{origin: 1}, {origin: 2}}},
	)
	// Targeted fields (RFC 9213): CDN-Cache-Control rules this cache under
	// UpstreamWindows, over Cache-Control, and is not forwarded.
	rows = append(rows,
		rfcRow{"RFC 9213 §2.2", "CDN-Cache-Control max-age over Cache-Control no-store (and forwarded, §3)", nil,
			always(200, "t", "Cache-Control", "no-store", "CDN-Cache-Control", "max-age=3600"),
			[]step{{origin: 1, want: []string{"Cdn-Cache-Control", "max-age=3600", "Cache-Control", "no-store"}}, {origin: 1, want: append(hit, "Cdn-Cache-Control", "max-age=3600")}}},
		rfcRow{"RFC 9213 §2.2", "CDN-Cache-Control no-store over Cache-Control max-age", nil,
			always(200, "t", "Cache-Control", "max-age=3600", "CDN-Cache-Control", "no-store"),
			[]step{{origin: 1, want: []string{"Cdn-Cache-Control", "no-store"}}, {origin: 2}}},
		rfcRow{"RFC 9213 §2.2", "CDN-Cache-Control private", nil,
			always(200, "t", "Cache-Control", "max-age=3600", "CDN-Cache-Control", "private"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"RFC 9213 §2.2", "CDN-Cache-Control ignores Expires", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", ago(time.Hour), "CDN-Cache-Control", "max-age=3600"}, "t"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"RFC 9213 §2.1", "an invalid CDN-Cache-Control is ignored", nil,
			always(200, "t", "Cache-Control", "max-age=3600", "CDN-Cache-Control", "max-age=,;"),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"RFC 9213 §2.1", "a CDN-Cache-Control max-age that is a string is invalid: Cache-Control rules", nil,
			always(200, "t", "Cache-Control", "no-store", "CDN-Cache-Control", `max-age="3600"`),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"RFC 9213 §2.1", "a CDN-Cache-Control with a space after = is invalid: Cache-Control rules", nil,
			always(200, "t", "Cache-Control", "no-store", "CDN-Cache-Control", "max-age= 3600"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"RFC 9213 §2.1", "a list of the user's targeted fields, first present first", &Config{UpstreamWindows: true, RequireFreshness: true, TargetedCacheControl: []string{"Stampede-Cache-Control", "CDN-Cache-Control"}},
			always(200, "t", "Stampede-Cache-Control", "max-age=3600", "CDN-Cache-Control", "no-store"),
			[]step{{origin: 1, want: []string{"Stampede-Cache-Control", absent, "Cdn-Cache-Control", "no-store"}}, {origin: 1, want: append(hit, "Stampede-Cache-Control", absent)}}},
		rfcRow{"RFC 9213", "zero Config: CDN-Cache-Control is not this cache's, forwarded as is", zero,
			always(200, "t", "CDN-Cache-Control", "no-store"),
			[]step{{origin: 1, want: []string{"Cdn-Cache-Control", "no-store"}}, {origin: 1, want: hit}}},
	)
	// Set-Cookie: shared only behind StoreSetCookie.
	rows = append(rows,
		rfcRow{"§3", "StoreSetCookie: a response with Set-Cookie is stored, the cookie with it", &Config{UpstreamWindows: true, StoreSetCookie: true},
			always(200, "c", "Cache-Control", "max-age=3600", "Set-Cookie", "s=1"),
			[]step{{origin: 1}, {origin: 1, want: append(hit, "Set-Cookie", "s=1")}}},
	)
	return rows
}
