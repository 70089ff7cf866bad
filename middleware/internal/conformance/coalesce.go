package conformance

import (
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

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
	ns := guard.Options{Namespace: redistest.Key(t, a.Name) + ":"}
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
