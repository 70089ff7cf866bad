package conformance

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// RFC9111 runs the HTTP-cache table against a: each row, written from the
// text of RFC 9111 (HTTP Caching), RFC 9110 §13 (conditional requests),
// RFC 5861 (stale-while-revalidate) and RFC 9211 (Cache-Status), sends its
// requests through a real server running the adapter's middleware in front
// of a real httputil.ReverseProxy, in front of a scripted origin that
// records every request it receives. Rows run in the strict configuration
// (UpstreamWindows, HonorClientNoCache, RequireFreshness: an RFC 9111
// shared cache) unless they say otherwise; the safety rows run in the zero
// Config too. Then the coalescing rows: three servers on one Redis, cold
// and stale-with-validator keys, one origin request for the fleet. All of
// it runs on standalone Redis and on a cluster.
//
// Staleness is made without waiting: an origin response that carries an Age
// (or a Date in the past) as large as its max-age is stale on arrival.
func RFC9111(t *testing.T, a Adapter) {
	t.Helper()
	if a.Name == "" || a.New == nil {
		t.Fatal("conformance: an Adapter needs a Name and a New func")
	}
	rows := rfcRows()
	sections := map[string]bool{}
	for _, row := range rows {
		sections[row.section] = true
	}
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			rdb := top.client(t)
			for _, row := range rows {
				t.Run(row.section+" "+row.name, func(t *testing.T) {
					t.Parallel()
					row.run(t, a, rdb)
				})
			}
			t.Run("coalescing/cold key, three servers", func(t *testing.T) { coalesceCold(t, a, rdb) })
			t.Run("coalescing/revalidation, three servers", func(t *testing.T) { coalesceRevalidation(t, a, rdb) })
		})
	}
	for _, top := range topologies {
		t.Run(top.name+"/invalidation, three servers", func(t *testing.T) { invalidationAcrossServers(t, a, top) })
		t.Run(top.name+"/invalidation, spellings", func(t *testing.T) { invalidationSpellings(t, a, top) })
		t.Run(top.name+"/invalidation, read your writes", func(t *testing.T) { invalidationReadYourWrites(t, a, top) })
		t.Run(top.name+"/invalidation, KeyHost", func(t *testing.T) { invalidationKeyHost(t, a, top) })
	}
	t.Logf("rfc9111: %d rows, %d sections, on %d topologies", len(rows), len(sections), len(topologies))
}

// strict is the configuration of an RFC 9111 shared cache.
var strict = Config{UpstreamWindows: true, HonorClientNoCache: true, RequireFreshness: true}

// reply is one scripted origin response.
type reply struct {
	status int
	header []string // name, value pairs
	body   string
}

// originFunc answers the origin's n-th request (from 1).
type originFunc func(n int, r *http.Request) reply

// always answers every request alike.
func always(status int, body string, kv ...string) originFunc {
	return func(int, *http.Request) reply { return reply{status, kv, body} }
}

// validated answers 304 to a request whose If-None-Match names etag, else
// 200 with body; kv go with both.
func validated(etag, body string, kv ...string) originFunc {
	return func(_ int, r *http.Request) reply {
		kv := append([]string{"ETag", etag}, kv...)
		if r.Header.Get("If-None-Match") == etag {
			return reply{304, kv, ""}
		}
		return reply{200, kv, body}
	}
}

// byCount answers the n-th request with replies[n-1], the last one after.
func byCount(replies ...reply) originFunc {
	return func(n int, _ *http.Request) reply { return replies[min(n, len(replies))-1] }
}

// step is one client request and what it must get.
type step struct {
	method     string   // default GET
	path       string   // default /r
	header     []string // request fields, name, value pairs
	status     int      // default 200
	body       *string  // nil: not checked
	want       []string // response fields, name, value pairs; value "<absent>" or "<present>"
	origin     int      // origin requests so far, after this step; -1 not checked
	eventually bool     // origin may reach the count after the step (a background refresh)
	// until: a background refresh of an earlier step decides this one's
	// answer; the request is repeated (up to 10 s) until its body is body.
	until bool
	check func(t *testing.T, resp *http.Response, seen []*http.Request)
}

func text(s string) *string { return &s }

const (
	absent  = "<absent>"
	present = "<present>"
)

// rfcRow is one row of the table.
type rfcRow struct {
	section, name string
	cfg           *Config // nil: strict
	origin        originFunc
	steps         []step
}

// stamp is an origin for rows whose responses carry a Date of now.
func now() string { return time.Now().UTC().Format(http.TimeFormat) }

func ago(d time.Duration) string { return time.Now().Add(-d).UTC().Format(http.TimeFormat) }

func rfcRows() []rfcRow {
	zero := &Config{}
	upstream := &Config{UpstreamWindows: true}
	hit := []string{"Cache-Status", "stampede; hit", "Age", present}
	var rows []rfcRow
	add := func(r ...rfcRow) { rows = append(rows, r...) }

	// Freshness (RFC 9111 §4.2).
	add(
		rfcRow{"§4.2.1", "max-age: stored from the first response", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{body: text("a"), origin: 1}, {body: text("a"), origin: 1, want: hit}}},
		rfcRow{"§4.2.1", "RequireFreshness: no explicit freshness, not stored", nil, always(200, "a"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§4.2.1", "RequireFreshness: public alone is no freshness", nil, always(200, "a", "Cache-Control", "public"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§4.2.2", "zero Config: stored without freshness information (the Group's windows)", zero, always(200, "a"),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§5.2.2.10", "s-maxage over max-age: s-maxage=0 is stale", nil, always(200, "a", "Cache-Control", "max-age=3600, s-maxage=0"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.2.2.10", "s-maxage over max-age: max-age=0 ignored", nil, always(200, "a", "Cache-Control", "max-age=0, s-maxage=3600"),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§5.2.2.1", "max-age with a quoted argument", nil, always(200, "a", "Cache-Control", `max-age="3600"`),
			[]step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§4.2.1", "max-age=0 without a validator: not stored", upstream, always(200, "a", "Cache-Control", "max-age=0"),
			[]step{{origin: 1}, {origin: 2}}},
	)
	// Expires (§5.3), evaluated against Date.
	add(
		rfcRow{"§5.3", "Expires in the future", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§5.3", "Expires in the past", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", ago(time.Hour)}, "a"}
		}, []step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.3", "Expires 0 is in the past", nil, always(200, "a", "Expires", "0"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.3", "invalid Expires is in the past", nil, always(200, "a", "Expires", "next tuesday"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.3, RFC 9110 §5.6.7", "an Expires with runs of spaces is invalid, so in the past", nil, func(int, *http.Request) reply {
			exp := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
			return reply{200, []string{"Date", now(), "Expires", strings.Replace(exp, " ", "  ", 1)}, "a"}
		}, []step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.3, RFC 9110 §5.6.7", "an Expires with a one-digit hour is invalid, so in the past", nil, always(200, "a", "Date", "Thu, 01 Jan 2099 00:00:00 GMT", "Expires", "Thu, 01 Jan 2099 2:00:00 GMT"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.3, RFC 9110 §5.6.7", "Expires in the rfc850 form", nil, func(int, *http.Request) reply {
			exp := time.Now().Add(time.Hour).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT")
			return reply{200, []string{"Date", now(), "Expires", exp}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§5.3, RFC 9110 §5.6.7", "Expires in the asctime form", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", time.Now().Add(time.Hour).UTC().Format(time.ANSIC)}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
		rfcRow{"§5.3", "max-age wins over an Expires in the past", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", now(), "Expires", ago(time.Hour), "Cache-Control", "max-age=3600"}, "a"}
		}, []step{{origin: 1}, {origin: 1, want: hit}}},
	)
	// Age (§4.2.3, §5.1).
	add(
		rfcRow{"§4.2.3", "Age as large as max-age: stale on arrival", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "3600"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§4.2.3", "Date in the past ages the response", nil, func(int, *http.Request) reply {
			return reply{200, []string{"Date", ago(2 * time.Hour), "Cache-Control", "max-age=3600"}, "a"}
		}, []step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.1", "a stored response's Age counts in the Age sent", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "100"),
			[]step{{origin: 1}, {origin: 1, check: wantAgeAtLeast(100)}}},
		rfcRow{"§5.1", "invalid Age is ignored", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "soon"),
			[]step{{origin: 1}, {origin: 1, check: wantAgeBelow(100)}}},
		rfcRow{"§5.1", "duplicated Age: the first member", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "100, 7000"),
			[]step{{origin: 1}, {origin: 1, check: wantAgeAtLeast(100)}}},
		rfcRow{"§1.2.2", "huge Age is capped, stale on arrival", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "99999999999999999999"),
			[]step{{origin: 1}, {origin: 2}}},
	)
	add(invalidationRows()...)
	add(statusRows()...)
	add(rangeRows()...)
	// Conditional requests answered from the store (RFC 9110 §13), in
	// every configuration.
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
	// Revalidation (§4.3).
	add(
		rfcRow{"§4.3.1", "a stale response with an ETag is revalidated with If-None-Match; the 304 freshens it", nil,
			byCount(reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600"}, "body one"},
				reply{304, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600"}, ""}),
			[]step{{body: text("body one"), origin: 1},
				{body: text("body one"), origin: 2, check: wantConditional(1, "If-None-Match", `"v1"`)},
				{body: text("body one"), origin: 2, want: hit}}},
		rfcRow{"§4.3.4", "the 304's fields replace the stored ones; the body stays", nil,
			byCount(reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600", "X-Version", "1", "Content-Type", "text/plain"}, "body one"},
				reply{304, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "X-Version", "2"}, ""}),
			[]step{{origin: 1}, {origin: 2},
				{body: text("body one"), origin: 2, want: []string{"X-Version", "2", "Content-Type", "text/plain", "Content-Length", "8"}}}},
		rfcRow{"§4.3.4", "a 304 that makes the response private: the stored one is served no more", nil,
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
		rfcRow{"§4.3.1", "Last-Modified: revalidated with If-Modified-Since", nil,
			byCount(reply{200, []string{"Last-Modified", "Tue, 01 Sep 2026 10:00:00 GMT", "Cache-Control", "max-age=3600", "Age", "3600"}, "b"},
				reply{304, []string{"Cache-Control", "max-age=3600"}, ""}),
			[]step{{origin: 1}, {body: text("b"), origin: 2, check: wantConditional(1, "If-Modified-Since", "Tue, 01 Sep 2026 10:00:00 GMT")},
				{origin: 2, want: hit}}},
		rfcRow{"§4.3.3", "a 200 to the revalidation replaces the stored response", nil,
			byCount(reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600"}, "old"},
				reply{200, []string{"ETag", `"v2"`, "Cache-Control", "max-age=3600"}, "new"}),
			[]step{{body: text("old"), origin: 1}, {body: text("new"), origin: 2}, {body: text("new"), origin: 2, want: hit}}},
		rfcRow{"§4.3.1", "no validator: no conditional request", nil,
			byCount(reply{200, []string{"Cache-Control", "max-age=1, stale-while-revalidate=600", "Age", "1"}, "a"}),
			[]step{{origin: 1}, {origin: 2, eventually: true, check: func(t *testing.T, _ *http.Response, seen []*http.Request) {
				if len(seen) > 1 && seen[1].Header.Get("If-None-Match") != "" {
					t.Error("a conditional request without a validator")
				}
			}}}},
	)
	// Never served stale without revalidation.
	add(
		rfcRow{"§5.2.2.2", "must-revalidate: not served stale, even within stale-while-revalidate", nil,
			validated(`"v1"`, "a", "Cache-Control", "max-age=3600, must-revalidate, stale-while-revalidate=600", "Age", "3600"),
			[]step{{origin: 1}, {body: text("a"), origin: 2, check: wantConditional(1, "If-None-Match", `"v1"`)}}},
		rfcRow{"§5.2.2.8", "proxy-revalidate: not served stale by a shared cache", nil,
			validated(`"v1"`, "a", "Cache-Control", "max-age=3600, proxy-revalidate, stale-while-revalidate=600", "Age", "3600"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.2.2.10", "s-maxage: not served stale by a shared cache", nil,
			validated(`"v1"`, "a", "Cache-Control", "s-maxage=10, stale-while-revalidate=600", "Age", "20"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"§5.2.2.4", "no-cache: stored, revalidated before each use", nil,
			validated(`"v1"`, "a", "Cache-Control", "no-cache"),
			[]step{{body: text("a"), origin: 1},
				{body: text("a"), origin: 2, check: wantConditional(1, "If-None-Match", `"v1"`)},
				{body: text("a"), origin: 3, check: wantConditional(2, "If-None-Match", `"v1"`)}}},
		rfcRow{"§5.2.2.4", "no-cache without a validator: not stored", nil, always(200, "a", "Cache-Control", "no-cache, max-age=3600"),
			[]step{{origin: 1}, {origin: 2}}},
		rfcRow{"RFC 5861 §3", "stale-while-revalidate: served stale, revalidated in the background", nil,
			validated(`"v1"`, "a", "Cache-Control", "max-age=1, stale-while-revalidate=600", "Age", "2"),
			[]step{{origin: 1}, {body: text("a"), want: []string{"Cache-Status", "stampede; fwd=stale"}, origin: 2, eventually: true}}},
	)
	// Never shared (§3, §3.5): both configurations.
	for _, cfg := range []struct {
		name string
		c    *Config
	}{{"strict", nil}, {"zero Config", zero}} {
		add(
			rfcRow{"§5.2.2.5", cfg.name + ": no-store is not stored", cfg.c, always(200, "a", "Cache-Control", "no-store, max-age=3600"),
				[]step{{origin: 1}, {origin: 2}}},
			rfcRow{"§5.2.2.7", cfg.name + ": private is not stored", cfg.c, always(200, "a", "Cache-Control", "private, max-age=3600"),
				[]step{{origin: 1}, {origin: 2}}},
			rfcRow{"§3", cfg.name + ": Set-Cookie is not shared", cfg.c, always(200, "a", "Cache-Control", "max-age=3600", "Set-Cookie", "s=1"),
				[]step{{origin: 1}, {origin: 2, want: []string{"Set-Cookie", "s=1"}}}},
			rfcRow{"§3.5", cfg.name + ": a request with Authorization is not served from, nor stored for, others", cfg.c,
				always(200, "a", "Cache-Control", "public, s-maxage=3600"),
				[]step{{header: []string{"Authorization", "Bearer x"}, origin: 1}, {origin: 2}, {header: []string{"Authorization", "Bearer y"}, origin: 3}}},
			rfcRow{"§4.1", cfg.name + ": Vary: * is never shared", cfg.c, always(200, "a", "Cache-Control", "max-age=3600", "Vary", "*"),
				[]step{{origin: 1}, {origin: 2}}},
			rfcRow{"§3", cfg.name + ": a 5xx without explicit freshness is not stored", cfg.c, always(503, "down"),
				[]step{{status: 503, origin: 1}, {status: 503, origin: 2}}},
		)
	}
	// Request directives (§5.2.1), under HonorClientNoCache.
	add(
		rfcRow{"§5.2.1.4", "request no-cache reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "no-cache"}, origin: 2}}},
		rfcRow{"§5.4", "request Pragma: no-cache reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Pragma", "no-cache"}, origin: 2}}},
		rfcRow{"§5.2.1.1", "request max-age=0 reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "max-age=0"}, origin: 2}}},
		rfcRow{"§5.2.1.1", "request max-age below the stored Age reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=3600", "Age", "50"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "max-age=10"}, origin: 2, want: []string{"Cache-Status", "stampede; fwd=request"}}, {header: []string{"Cache-Control", "max-age=100"}, origin: 2}}},
		rfcRow{"§5.2.1.3", "request min-fresh beyond the freshness left reaches the origin", nil, always(200, "a", "Cache-Control", "max-age=100"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "min-fresh=200"}, origin: 2}, {header: []string{"Cache-Control", "min-fresh=10"}, origin: 2}}},
		rfcRow{"§5.2.1.7", "only-if-cached with nothing stored: 504", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{header: []string{"Cache-Control", "only-if-cached"}, status: 504, origin: 0}}},
		rfcRow{"§5.2.1.7", "only-if-cached with a stored response", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "only-if-cached"}, body: text("a"), origin: 1}}},
		rfcRow{"DESIGN §6", "zero Config: a client's no-cache does not reach the origin", zero, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {header: []string{"Cache-Control", "no-cache"}, origin: 1}}},
	)
	// Vary (§4.1).
	lang := always(200, "a", "Cache-Control", "max-age=3600", "Vary", "Accept-Language")
	add(
		rfcRow{"§4.1", "Vary: the same value selects the stored variant", nil, lang,
			[]step{{header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "fr"}, origin: 1, want: hit}}},
		rfcRow{"§4.1", "Vary: another value goes to the origin", nil, lang,
			[]step{{header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "de"}, origin: 2}, {header: []string{"Accept-Language", "fr"}, origin: 2}}},
		rfcRow{"§4.1", "Vary: absent differs from present", nil, lang,
			[]step{{origin: 1}, {header: []string{"Accept-Language", "fr"}, origin: 2}, {origin: 2}}},
		rfcRow{"§4.1", "Vary: values normalised (whitespace, case of a case-insensitive list)", nil,
			always(200, "a", "Cache-Control", "max-age=3600", "Vary", "Accept-Encoding"),
			[]step{{header: []string{"Accept-Encoding", "gzip, br"}, origin: 1}, {header: []string{"Accept-Encoding", "GZIP,br"}, origin: 1}}},
		rfcRow{"§4.1", "Vary on two fields", nil, always(200, "a", "Cache-Control", "max-age=3600", "Vary", "Accept-Language, X-Mode"),
			[]step{{header: []string{"Accept-Language", "fr", "X-Mode", "a"}, origin: 1}, {header: []string{"Accept-Language", "fr", "X-Mode", "b"}, origin: 2},
				{header: []string{"Accept-Language", "fr", "X-Mode", "a"}, origin: 2}}},
		rfcRow{"§4.1", "Vary names that change: the new response is not shared, the next one relearns them", nil,
			byCount(reply{200, []string{"Cache-Control", "max-age=3600", "Vary", "Accept-Language"}, "by language"},
				reply{200, []string{"Cache-Control", "max-age=3600", "Vary", "X-Mode"}, "by mode"}),
			[]step{{header: []string{"Accept-Language", "fr"}, body: text("by language"), origin: 1},
				{header: []string{"Accept-Language", "de"}, body: text("by mode"), origin: 2, want: []string{"Cache-Status", `stampede; fwd=miss; detail="Vary changed"`}},
				{header: []string{"Accept-Language", "de"}, body: text("by mode"), origin: 3},
				{header: []string{"Accept-Language", "de"}, body: text("by mode"), origin: 3, want: hit}}},
		rfcRow{"§4.1", "Vary on a KeyHeaders field", &Config{UpstreamWindows: true, HonorClientNoCache: true, RequireFreshness: true, KeyHeaders: []string{"Accept-Language"}}, lang,
			[]step{{header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "fr"}, origin: 1}, {header: []string{"Accept-Language", "de"}, origin: 2}}},
	)
	// HEAD (§4, RFC 9110 §9.3.2) and Cache-Status (RFC 9211).
	add(
		rfcRow{"RFC 9110 §9.3.2", "HEAD after a stored GET: from the store, no body", nil, always(200, "abc", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {method: http.MethodHead, body: text(""), origin: 1, want: []string{"Content-Length", "3", "Cache-Status", "stampede; hit"}}}},
		rfcRow{"RFC 9110 §9.3.2", "HEAD with nothing stored reaches the origin as HEAD, stores nothing", nil, always(200, "abc", "Cache-Control", "max-age=3600"),
			[]step{{method: http.MethodHead, origin: 1, check: func(t *testing.T, _ *http.Response, seen []*http.Request) {
				if seen[0].Method != http.MethodHead {
					t.Errorf("the origin saw %s, want HEAD", seen[0].Method)
				}
			}}, {body: text("abc"), origin: 2}}},
		rfcRow{"RFC 9211 §2", "Cache-Status: a stored miss, then a hit", nil, always(200, "a", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1, want: []string{"Cache-Status", "stampede; fwd=miss; stored"}}, {origin: 1, want: []string{"Cache-Status", "stampede; hit"}}}},
		rfcRow{"RFC 9211 §2", "Cache-Status: not stored", nil, always(200, "a"),
			[]step{{origin: 1, want: []string{"Cache-Status", `stampede; fwd=miss; detail="no explicit freshness"`}}}},
		rfcRow{"RFC 9211 §2", "Cache-Status: the upstream caches' members come first", nil, always(200, "a", "Cache-Control", "max-age=3600", "Cache-Status", "edge; hit"),
			[]step{{origin: 1, want: []string{"Cache-Status", "edge; hit, stampede; fwd=miss; stored"}}, {origin: 1, want: []string{"Cache-Status", "edge; hit, stampede; hit"}}}},
		rfcRow{"RFC 9211 §2", "Cache-Status: the upstream caches' members come first, not stored", nil, always(200, "a", "Cache-Status", "edge; fwd=uri-miss"),
			[]step{{origin: 1, want: []string{"Cache-Status", `edge; fwd=uri-miss, stampede; fwd=miss; detail="no explicit freshness"`}}}},
	)
	return rows
}

func wantConditional(i int, name, value string) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, _ *http.Response, seen []*http.Request) {
		t.Helper()
		if len(seen) <= i {
			t.Fatalf("the origin saw %d requests", len(seen))
		}
		if got := seen[i].Header.Get(name); got != value {
			t.Errorf("origin request %d: %s %q, want %q", i+1, name, got, value)
		}
	}
}

func wantAgeAtLeast(n int) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, resp *http.Response, _ []*http.Request) {
		t.Helper()
		var age int
		if _, err := fmt.Sscan(resp.Header.Get("Age"), &age); err != nil || age < n {
			t.Errorf("Age %q, want at least %d", resp.Header.Get("Age"), n)
		}
	}
}

func wantAgeBelow(n int) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, resp *http.Response, _ []*http.Request) {
		t.Helper()
		var age int
		if _, err := fmt.Sscan(resp.Header.Get("Age"), &age); err != nil || age >= n {
			t.Errorf("Age %q, want below %d", resp.Header.Get("Age"), n)
		}
	}
}

// scripted is an origin server that answers with f and records what it
// received.
type scripted struct {
	mu   sync.Mutex
	seen []*http.Request
	f    originFunc
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, r.Clone(r.Context()))
	n := len(s.seen)
	s.mu.Unlock()
	rep := s.f(n, r)
	for i := 0; i+1 < len(rep.header); i += 2 {
		w.Header().Add(rep.header[i], rep.header[i+1])
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (s *scripted) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// front starts the chain client → adapter → ReverseProxy → origin on
// loopback and returns the front's URL; wrap, when set, wraps the adapter.
func front(t *testing.T, a Adapter, g *guard.Group, cfg Config, origin http.Handler, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	o := httptest.NewServer(origin)
	t.Cleanup(o.Close)
	u, err := url.Parse(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	h := a.New(g, cfg, proxy)
	if wrap != nil {
		h = wrap(h)
	}
	f := httptest.NewServer(h)
	t.Cleanup(f.Close)
	return f.URL
}

// client sends requests as they are: no compression negotiated, no
// redirects followed.
var client = &http.Client{
	Transport:     &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       20 * time.Second,
}

func (row rfcRow) run(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	cfg := strict
	if row.cfg != nil {
		cfg = *row.cfg
	}
	g := NewGroup(t, rdb, guard.Options{})
	origin := &scripted{f: row.origin}
	base := front(t, a, g, cfg, origin, nil)
	for i, st := range row.steps {
		method := cmpOr(st.method, http.MethodGet)
		req, err := http.NewRequest(method, base+cmpOr(st.path, "/r"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "cache.example"
		for j := 0; j+1 < len(st.header); j += 2 {
			req.Header.Add(st.header[j], st.header[j+1])
		}
		resp, body := sendStep(t, req, i+1)
		for deadline := time.Now().Add(10 * time.Second); st.until && string(body) != *st.body && time.Now().Before(deadline); {
			resp, body = sendStep(t, req, i+1)
		}
		if want := cmpOr(st.status, http.StatusOK); resp.StatusCode != want {
			t.Errorf("step %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
		if st.body != nil && string(body) != *st.body {
			t.Errorf("step %d: body %q, want %q", i+1, body, *st.body)
		}
		for j := 0; j+1 < len(st.want); j += 2 {
			name, want := st.want[j], st.want[j+1]
			got, ok := resp.Header[http.CanonicalHeaderKey(name)]
			switch {
			case want == absent && ok:
				t.Errorf("step %d: %s %q, want none", i+1, name, got)
			case want == present && !ok:
				t.Errorf("step %d: no %s", i+1, name)
			case want != absent && want != present && strings.Join(got, ", ") != want:
				t.Errorf("step %d: %s %q, want %q", i+1, name, got, want)
			}
		}
		if st.origin >= 0 {
			waitOrigin(t, origin, st.origin, st.eventually, i+1)
		}
		if st.check != nil {
			st.check(t, resp, origin.requests())
		}
	}
}

// sendStep sends req (again, for until) and reads its answer.
func sendStep(t *testing.T, req *http.Request, step int) (*http.Response, []byte) {
	t.Helper()
	resp, err := client.Do(req.Clone(req.Context()))
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, body
}

// waitOrigin checks the origin's request count; a background refresh may
// take a moment to reach it, so eventually polls the count (a state of the
// origin, not a stand-in for synchronisation) for up to 10 s.
func waitOrigin(t *testing.T, origin *scripted, want int, eventually bool, step int) {
	t.Helper()
	if eventually {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); len(origin.requests()) < want && time.Now().Before(deadline); <-tick.C {
		}
	}
	if got := len(origin.requests()); got != want {
		t.Errorf("step %d: the origin saw %d requests, want %d", step, got, want)
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// coalesceCold: N clients on three servers (three Groups on one Redis) ask
// for a cold URL at once: one origin request for the fleet.
func coalesceCold(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	release := make(chan struct{})
	origin := &scripted{f: func(int, *http.Request) reply {
		<-release
		return reply{200, []string{"Cache-Control", "max-age=3600"}, "cold"}
	}}
	coalesce(t, a, rdb, origin, release, nil, "cold")
	if n := len(origin.requests()); n != 1 {
		t.Errorf("the origin saw %d requests, want 1", n)
	}
}

// coalesceRevalidation: a stored response past its freshness, with a
// validator and no stale window, is revalidated once for the fleet: one
// conditional origin request (a 304), every client served the stored body.
func coalesceRevalidation(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	release := make(chan struct{})
	origin := &scripted{f: func(n int, r *http.Request) reply {
		if n == 1 {
			return reply{200, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600", "Age", "3600"}, "kept body"}
		}
		<-release
		if r.Header.Get("If-None-Match") == `"v1"` {
			return reply{304, []string{"ETag", `"v1"`, "Cache-Control", "max-age=3600"}, ""}
		}
		return reply{200, []string{"ETag", `"v2"`, "Cache-Control", "max-age=3600"}, "new body"}
	}}
	fill := func(base string) {
		resp, err := client.Do(fleetRequest(t, base))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	coalesce(t, a, rdb, origin, release, fill, "kept body")
	seen := origin.requests()
	if len(seen) != 2 {
		t.Fatalf("the origin saw %d requests, want 2 (the fill, one revalidation)", len(seen))
	}
	if got := seen[1].Header.Get("If-None-Match"); got != `"v1"` {
		t.Errorf("the revalidation carried If-None-Match %q", got)
	}
}

// coalesce runs 3 servers × 8 clients on one URL of origin, releasing the
// origin once every client's request has reached a server's middleware;
// before, when set, runs first, on a fourth server of the fleet.
func coalesce(t *testing.T, a Adapter, rdb redis.UniversalClient, origin *scripted, release chan struct{}, before func(string), want string) {
	const servers, perServer = 3, 8
	ns := guard.Options{Namespace: strings.ReplaceAll(t.Name(), "/", ":") + ":" + a.Name + ":"}
	var bases []string
	gate := newGate(servers * perServer)
	for range servers {
		g := NewGroup(t, rdb, ns)
		bases = append(bases, front(t, a, g, strict, origin, gate.in))
	}
	if before != nil {
		before(front(t, a, NewGroup(t, rdb, ns), strict, origin, nil))
	}
	var wg sync.WaitGroup
	bodies := make(chan string, servers*perServer)
	for i := range servers * perServer {
		wg.Go(func() {
			resp, err := client.Do(fleetRequest(t, bases[i%servers]))
			if err != nil {
				bodies <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			bodies <- string(b)
		})
	}
	gate.wait(t)
	close(release)
	wg.Wait()
	close(bodies)
	for b := range bodies {
		if b != want {
			t.Errorf("a client got %q, want %q", b, want)
		}
	}
}

// fleetRequest is a GET of the fleet's one URL, sent to the server at base:
// every server of a fleet serves the same Host.
func fleetRequest(t *testing.T, base string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, base+"/r", nil)
	if err != nil {
		t.Error(err)
	}
	req.Host = "fleet.example"
	return req
}
