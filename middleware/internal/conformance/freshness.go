package conformance

import (
	"net/http"
	"strings"
	"time"
)

// freshnessRows: freshness (RFC 9111 §4.2).
func freshnessRows() []rfcRow {
	zero := &Config{}
	upstream := &Config{UpstreamWindows: true}
	return []rfcRow{
		{"§4.2.1", "max-age: stored from the first response", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{body: text("a"), origin: 1}, {body: text("a"), origin: 1, want: hit}}},
		{"§4.2.1", "RequireFreshness: no explicit freshness, not stored", nil, always(200, "a"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§4.2.1", "RequireFreshness: public alone is no freshness", nil, always(200, "a", "Cache-Control", "public"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§4.2.2", "zero Config: stored without freshness information (the Group's windows)", zero, always(200, "a"),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		{"§5.2.2.10", "s-maxage over max-age: s-maxage=0 is stale", nil, always(200, "a", "Cache-Control", "max-age=3600, s-maxage=0"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§5.2.2.10", "s-maxage over max-age: max-age=0 ignored", nil, always(200, "a", "Cache-Control", "max-age=0, s-maxage=3600"),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		{"§5.2.2.1", "max-age with a quoted argument", nil, always(200, "a", "Cache-Control", `max-age="3600"`),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		{"§4.2.1", "max-age=0 without a validator: not stored", upstream, always(200, "a", "Cache-Control", "max-age=0"),
			[]step{{origin: 1}, {origin: 2}}},
	}
}

// expiresRows: Expires (§5.3), evaluated against Date.
func expiresRows() []rfcRow {
	return []rfcRow{
		{"§5.3", "Expires in the future", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		{"§5.3", "Expires in the past", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", ago(time.Hour)}, "a"}
		}, []step{{origin: 1}, {origin: 2}}},
		{"§5.3", "Expires 0 is in the past", nil, always(200, "a", "Expires", "0"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§5.3", "invalid Expires is in the past", nil, always(200, "a", "Expires", "next tuesday"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§5.3, RFC 9110 §5.6.7", "an Expires with runs of spaces is invalid, so in the past", nil, func(int, *http.Request) reply {
			exp := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
			return reply{200, []string{"Date", now(), "Expires", strings.Replace(exp, " ", "  ", 1)}, "a"}
		}, []step{{origin: 1}, {origin: 2}}},
		{"§5.3, RFC 9110 §5.6.7", "an Expires with a one-digit hour is invalid, so in the past", nil, always(200, "a", "Date", "Thu, 01 Jan 2099 00:00:00 GMT", "Expires", "Thu, 01 Jan 2099 2:00:00 GMT"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§5.3, RFC 9110 §5.6.7", "Expires in the rfc850 form", nil, func(int, *http.Request) reply {
			exp := time.Now().Add(time.Hour).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT")
			return reply{200, []string{"Date", now(), "Expires", exp}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		{"§5.3, RFC 9110 §5.6.7", "Expires in the asctime form", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", time.Now().Add(time.Hour).UTC().Format(time.ANSIC)}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		{"§5.3", "max-age wins over an Expires in the past", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", ago(time.Hour), "Cache-Control", "max-age=3600"}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
	}
}

// ageRows: Age (§4.2.3, §5.1).
func ageRows() []rfcRow {
	return []rfcRow{
		{"§4.2.3", "Age as large as max-age: stale on arrival", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "3600"),
			[]step{{origin: 1}, {origin: 2}}},
		{"§4.2.3", "Date in the past ages the response", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", ago(2 * time.Hour), "Cache-Control", "max-age=3600"}, "a"}
		}, []step{{origin: 1}, {origin: 2}}},
		{"§5.1", "a stored response's Age counts in the Age sent", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "100"),
			[]step{{origin: 1}, {origin: 1, check: wantAgeAtLeast(100)}}},
		{"§5.1", "invalid Age is ignored", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "soon"),
			[]step{{origin: 1}, {origin: 1, check: wantAgeBelow(100)}}},
		{"§5.1", "duplicated Age: the first member", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "100, 7000"),
			[]step{{origin: 1}, {origin: 1, check: wantAgeAtLeast(100)}}},
		{"§1.2.2", "huge Age is capped, stale on arrival", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "99999999999999999999"),
			[]step{{origin: 1}, {origin: 2}}},
	}
}
