package conformance

import (
	"testing"
)

// Rules runs the adapter-neutral rules against a: what is never shared,
// keys, Cache-Status and Age, HEAD, coalescing across two servers, the
// handler detached from a client that left, panics, streaming, and stale
// responses. Each rule runs on a standalone Redis and on a cluster (see
// topologies); the stale rules, which move the Redis clock, run on
// miniredis. The calling test package must run redistest.Main from its
// TestMain.
func Rules(t *testing.T, a Adapter) {
	t.Helper()
	if a.Name == "" || a.New == nil {
		t.Fatal("conformance: an Adapter needs a Name and a New func")
	}
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			t.Run("sharing", func(t *testing.T) { sharing(t, a, top.client(t)) })
			t.Run("coalescing across servers", func(t *testing.T) { coalescingAcrossServers(t, a, top) })
			t.Run("followers run their own handler", func(t *testing.T) { followersRunTheirOwnHandler(t, a, top) })
			t.Run("leader disconnect", func(t *testing.T) { leaderDisconnect(t, a, top) })
			t.Run("handler panic", func(t *testing.T) { handlerPanic(t, a, top) })
			t.Run("panic followers", func(t *testing.T) { panicFollowers(t, a, top) })
			t.Run("handler goexit", func(t *testing.T) { handlerGoexit(t, a, top) })
			t.Run("large body streams", func(t *testing.T) { largeBodyStreams(t, a, top) })
			t.Run("panic while streaming", func(t *testing.T) { panicWhileStreaming(t, a, top) })
			t.Run("event stream", func(t *testing.T) { eventStream(t, a, top) })
			t.Run("failures take turns across servers", func(t *testing.T) { failuresTakeTurnsAcrossServers(t, a, top) })
			t.Run("failing turns time out", func(t *testing.T) { failingTurnsTimeOut(t, a, top) })
			t.Run("slow failures one at a time", func(t *testing.T) { slowFailuresOneAtATime(t, a, top) })
			t.Run("abandoned handler not rerun", func(t *testing.T) { abandonedHandlerNotRerun(t, a, top) })
			t.Run("pass skips the flight", func(t *testing.T) { passSkipsTheFlight(t, a, top) })
			t.Run("unstorable response not amplified", func(t *testing.T) { unstorableNotAmplified(t, a, top) })
			t.Run("panic on unkeyed input", func(t *testing.T) { panicOnUnkeyedInput(t, a, top) })
			t.Run("interim responses", func(t *testing.T) { interimResponses(t, a, top) })
			t.Run("KeyHost", func(t *testing.T) { keyHost(t, a, top) })
			t.Run("Skipper", func(t *testing.T) { skipper(t, a, top) })
		})
	}
	t.Run("stale", func(t *testing.T) { stale(t, a) })
	t.Run("stale served while refresh fails", func(t *testing.T) { staleServedWhileRefreshFails(t, a) })
	t.Run("upstream windows", func(t *testing.T) { upstreamWindows(t, a) })
}
