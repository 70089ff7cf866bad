package httpcache

import (
	"net/http"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// TestPlace: the windows a response's own freshness gives it (RFC 9111
// §4.2, RFC 5861), in each configuration.
func TestPlace(t *testing.T) {
	const s = time.Second
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	upstream := &engine{upstream: true}
	strict := &engine{upstream: true, strict: true}
	zero := &engine{}
	rows := []struct {
		name string
		e    *engine
		h    http.Header
		want placement
	}{
		{"zero config: the Group's windows", zero, http.Header{"Cache-Control": {"max-age=10"}}, placement{}},
		{"no directive: the Group's windows", upstream, http.Header{}, placement{}},
		{"strict: no freshness is not stored", strict, http.Header{}, placement{reason: "no explicit freshness"}},
		{"strict: public alone is not freshness", strict, http.Header{"Cache-Control": {"public"}}, placement{reason: "no explicit freshness"}},
		{"max-age", strict, http.Header{"Cache-Control": {"max-age=10"}}, placement{w: guard.Windows{Fresh: 10 * s, Stale: guard.Disabled}}},
		{"s-maxage over max-age, never stale", strict, http.Header{"Cache-Control": {"max-age=10, s-maxage=20, stale-while-revalidate=60"}}, placement{w: guard.Windows{Fresh: 20 * s, Stale: guard.Disabled}}},
		{"case-insensitive names", strict, http.Header{"Cache-Control": {"S-MaxAge=5, max-age=20"}}, placement{w: guard.Windows{Fresh: 5 * s, Stale: guard.Disabled}}},
		{"quoted argument", strict, http.Header{"Cache-Control": {`max-age="7"`}}, placement{w: guard.Windows{Fresh: 7 * s, Stale: guard.Disabled}}},
		{"repeated directive: the first", strict, http.Header{"Cache-Control": {"max-age=5, max-age=50"}}, placement{w: guard.Windows{Fresh: 5 * s, Stale: guard.Disabled}}},
		{"malformed max-age is stale on arrival", strict, http.Header{"Cache-Control": {"max-age=soon"}}, placement{reason: "stale on arrival"}},
		{"Age counts", strict, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"55"}}, placement{w: guard.Windows{Fresh: 5 * s, Stale: guard.Disabled}}},
		{"invalid Age is ignored", strict, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"-5"}}, placement{w: guard.Windows{Fresh: 60 * s, Stale: guard.Disabled}}},
		{"list Age: the first member", strict, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"10, 50"}}, placement{w: guard.Windows{Fresh: 50 * s, Stale: guard.Disabled}}},
		{"huge Age: stale on arrival", strict, http.Header{"Cache-Control": {"max-age=60"}, "Age": {"99999999999999999999999"}}, placement{reason: "stale on arrival"}},
		{"swr", strict, http.Header{"Cache-Control": {"max-age=10, stale-while-revalidate=30"}}, placement{w: guard.Windows{Fresh: 10 * s, Stale: 30 * s}}},
		{"sie", strict, http.Header{"Cache-Control": {"max-age=10, stale-if-error=40"}}, placement{w: guard.Windows{Fresh: 10 * s, Stale: 40 * s}}},
		{"stale on arrival, within swr", strict, http.Header{"Cache-Control": {"max-age=10, stale-while-revalidate=30"}, "Age": {"20"}}, placement{w: guard.Windows{Fresh: guard.Expired, Stale: 20 * s}}},
		{"must-revalidate: kept to revalidate", strict, http.Header{"Cache-Control": {"max-age=10, must-revalidate, stale-while-revalidate=30"}, "Etag": {`"a"`}}, placement{w: guard.Windows{Fresh: 10 * s, Stale: minKeep}, mustRevalidate: true}},
		{"validator, no stale window: kept to revalidate", strict, http.Header{"Cache-Control": {"max-age=7200"}, "Last-Modified": {date}}, placement{w: guard.Windows{Fresh: 7200 * s, Stale: 7200 * s}, mustRevalidate: true}},
		{"max-age=0 with a validator", strict, http.Header{"Cache-Control": {"max-age=0"}, "Etag": {`"a"`}}, placement{w: guard.Windows{Fresh: guard.Expired, Stale: minKeep}, mustRevalidate: true}},
		{"max-age=0 without a validator", upstream, http.Header{"Cache-Control": {"max-age=0"}}, placement{reason: "stale on arrival"}},
		{"no-cache with a validator", strict, http.Header{"Cache-Control": {"no-cache, max-age=60"}, "Etag": {`"a"`}}, placement{w: guard.Windows{Fresh: guard.Expired, Stale: minKeep}, mustRevalidate: true}},
		{"no-cache without a validator", upstream, http.Header{"Cache-Control": {"no-cache"}}, placement{reason: "no-cache without a validator"}},
		{"Expires against Date", strict, http.Header{"Date": {date}, "Expires": {now.Add(90 * s).Format(http.TimeFormat)}}, placement{w: guard.Windows{Fresh: 90 * s, Stale: guard.Disabled}}},
		{"max-age over Expires", strict, http.Header{"Date": {date}, "Expires": {now.Add(90 * s).Format(http.TimeFormat)}, "Cache-Control": {"max-age=5"}}, placement{w: guard.Windows{Fresh: 5 * s, Stale: guard.Disabled}}},
		{"Expires 0 is in the past", strict, http.Header{"Date": {date}, "Expires": {"0"}}, placement{reason: "stale on arrival"}},
		{"Expires before Date", strict, http.Header{"Date": {date}, "Expires": {now.Add(-s).Format(http.TimeFormat)}}, placement{reason: "stale on arrival"}},
		{"Date in the past ages the response", strict, http.Header{"Date": {now.Add(-30 * s).Format(http.TimeFormat)}, "Cache-Control": {"max-age=100"}}, placement{w: guard.Windows{Fresh: 70 * s, Stale: guard.Disabled}}},
		{"upstream: swr alone keeps the Group's fresh window", upstream, http.Header{"Cache-Control": {"stale-while-revalidate=30"}}, placement{w: guard.Windows{Stale: 30 * s}}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			cc, targeted := row.e.responseCC(row.h)
			f := responseFreshness(row.h, cc, targeted, now, now)
			f.status = 200
			got := row.e.place(f)
			if got != row.want {
				t.Errorf("got %+v, want %+v", got, row.want)
			}
		})
	}
}

// TestRequestDirectives: the directives a client may send.
func TestRequestDirectives(t *testing.T) {
	cc := parseCacheControl([]string{"max-stale, min-fresh=5", "only-if-cached, max-age=3"})
	if cc.maxStale != maxDelta || cc.minFresh != 5 || !cc.onlyIfCached || cc.maxAge != 3 {
		t.Errorf("got %+v", cc)
	}
	if cc := parseCacheControl([]string{"max-stale=9"}); cc.maxStale != 9 {
		t.Errorf("max-stale=9: got %d", cc.maxStale)
	}
}
