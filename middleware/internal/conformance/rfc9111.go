package conformance

import (
	"slices"
	"testing"
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

// rfcRows is the table, topic by topic, in the order the rows run.
func rfcRows() []rfcRow {
	return slices.Concat(
		freshnessRows(), expiresRows(), ageRows(),
		invalidationRows(), statusRows(), rangeRows(),
		conditionalRows(), revalidationRows(), mustRevalidateRows(),
		neverSharedRows(), requestDirectiveRows(), varyRows(),
		headRows(), cacheStatusRows(),
	)
}
