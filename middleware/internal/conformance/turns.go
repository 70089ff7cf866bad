package conformance

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// inFlight counts the handler calls running at once, and the most ever.
type inFlight struct{ now, max atomic.Int64 }

func (f *inFlight) enter() func() {
	n := f.now.Add(1)
	for m := f.max.Load(); n > m && !f.max.CompareAndSwap(m, n); m = f.max.Load() {
	}
	return func() { f.now.Add(-1) }
}

// servers starts n servers of a on one Redis namespace (n Groups, as n
// nodes would be), each with origin behind the adapter.
func servers(t *testing.T, a Adapter, top topology, n int, o guard.Options, cfg Config, origin http.Handler) []string {
	if o.Namespace == "" {
		o.Namespace = redistest.Key(t) + ":"
	}
	var urls []string
	for range n {
		g := NewGroup(t, top.client(t), o)
		srv := quietServer(t, a.New(g, cfg, origin))
		urls = append(urls, srv.URL)
	}
	return urls
}

// fetch sends a GET for path to base, with Host shop.example and the
// given header pairs, and returns status, body and Cache-Status; an
// exchange that broke off gives status 0.
func fetch(client *http.Client, base, path string, kv ...string) (status int, body, cs string) {
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Host = "shop.example"
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", ""
	}
	return resp.StatusCode, string(b), resp.Header.Get("Cache-Status")
}

// failuresTakeTurnsAcrossServers: while a cold URL's handler fails (500),
// the requests of two servers take turns at it, one call at a time across
// the fleet; each gets its own handler call's answer or, past the guard's
// WaitTimeout, a 503 with Retry-After; none gets another request's body.
// Then the first 200 is shared with everyone still waiting.
func failuresTakeTurnsAcrossServers(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	const perServer, failures = 12, 6
	var flight inFlight
	var calls atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer flight.enter()()
		n := calls.Add(1)
		work(5 * time.Millisecond)
		if n <= failures {
			w.WriteHeader(http.StatusInternalServerError)
		}
		fmt.Fprint(w, r.Header.Get("X-Req"))
	})
	urls := servers(t, a, top, 2, guard.Options{WaitTimeout: time.Minute}, Config{}, origin)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * perServer}}
	t.Cleanup(client.CloseIdleConnections)
	type answer struct {
		status   int
		body, id string
	}
	answers := make(chan answer, 2*perServer)
	var wg sync.WaitGroup
	for i := range 2 * perServer {
		wg.Go(func() {
			id := fmt.Sprint("req-", i)
			st, body, _ := fetch(client, urls[i%2], "/failing", "X-Req", id)
			answers <- answer{st, body, id}
		})
	}
	wg.Wait()
	close(answers)
	own500, shared := 0, 0
	for ans := range answers {
		switch {
		case ans.status == http.StatusInternalServerError && ans.body == ans.id:
			own500++
		case ans.status == http.StatusOK && strings.HasPrefix(ans.body, "req-"):
			shared++
		default:
			t.Errorf("%s got %d %q", ans.id, ans.status, ans.body)
		}
	}
	if got := flight.max.Load(); got != 1 {
		t.Errorf("%d handler calls at once across the fleet, want 1", got)
	}
	if own500 != failures || shared != 2*perServer-failures {
		t.Errorf("%d own 500s and %d shared 200s, want %d and %d", own500, shared, failures, 2*perServer-failures)
	}
	if got := calls.Load(); got != failures+1 {
		t.Errorf("handler calls %d, want %d (one per failure, then one 200 shared)", got, failures+1)
	}
}

// failingTurnsTimeOut: a URL whose handler keeps failing answers the
// requests whose turn does not come within WaitTimeout with 503 and
// Retry-After, never with another request's failure.
func failingTurnsTimeOut(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var flight inFlight
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer flight.enter()()
		work(30 * time.Millisecond)
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, r.Header.Get("X-Req"))
	})
	urls := servers(t, a, top, 2, guard.Options{WaitTimeout: 100 * time.Millisecond}, Config{}, origin)
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	own, busy := failingWave(t, client, urls, "/down", 16, "req-")
	if got := flight.max.Load(); got != 1 {
		t.Errorf("%d handler calls at once across the fleet, want 1", got)
	}
	if busy == 0 {
		t.Errorf("no request waited past WaitTimeout (own answers %d): not exercised", own)
	}
}

// failingWave sends n concurrent GETs of path, alternating between the
// servers at urls, each with an X-Req id of its own (prefix and its
// number), to a handler that answers 502 with that id; it counts the
// requests that got their own 502 and those answered 503 with
// Retry-After, and fails t for any other answer.
func failingWave(t *testing.T, client *http.Client, urls []string, path string, n int, prefix string) (own, busy int64) {
	var nOwn, nBusy atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprint(prefix, i)
			req, _ := http.NewRequest(http.MethodGet, urls[i%len(urls)]+path, nil)
			req.Host = "shop.example" // the servers behind one name
			req.Header.Set("X-Req", id)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusBadGateway && string(b) == id:
				nOwn.Add(1)
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
				nBusy.Add(1)
			default:
				t.Errorf("%s got %d %q", id, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	return nOwn.Load(), nBusy.Load()
}

// passSkipsTheFlight: once a URL's response could not be shared (a
// cookie), its requests run the handler at once, concurrently, on every
// server, each getting its own response; NotStored says why; the first
// shareable response ends the window and is shared.
func passSkipsTheFlight(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	const calls = 6
	var private atomic.Bool
	private.Store(true)
	var barrier sync.WaitGroup
	barrier.Add(calls + 1) // the first request, then the window's
	all := make(chan struct{})
	go func() { barrier.Wait(); close(all) }()
	var phase atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if private.Load() {
			if phase.Add(1) > 1 {
				barrier.Done()
				select {
				case <-all:
				case <-time.After(10 * time.Second):
					// A serialized or coalesced request never gets here
					// with the others: the test fails below.
				}
			} else {
				barrier.Done()
			}
			http.SetCookie(w, &http.Cookie{Name: "s", Value: r.Header.Get("X-Req")})
		}
		fmt.Fprint(w, r.Header.Get("X-Req"))
	})
	var whys sync.Map
	cfg := Config{NotStored: func(_ *http.Request, why string) { whys.Store(why, true) }}
	urls := servers(t, a, top, 2, guard.Options{}, cfg, origin)
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	if st, body, cs := fetch(client, urls[0], "/p", "X-Req", "first"); st != 200 || body != "first" || !strings.Contains(cs, "detail=") {
		t.Fatalf("first: %d %q %q", st, body, cs)
	}
	if _, ok := whys.Load("response not shareable"); !ok {
		t.Error("NotStored not told")
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			id := fmt.Sprint("req-", i)
			st, body, cs := fetch(client, urls[i%2], "/p", "X-Req", id)
			if st != 200 || body != id || !strings.HasPrefix(cs, "stampede; fwd=miss") {
				t.Errorf("%s: %d %q %q", id, st, body, cs)
			}
		})
	}
	wg.Wait()
	if time.Since(start) > 5*time.Second {
		t.Errorf("the window's requests did not run at once")
	}
	private.Store(false)
	if st, body, cs := fetch(client, urls[1], "/p", "X-Req", "shared"); st != 200 || body != "shared" || cs != "stampede; fwd=miss; detail=pass" {
		t.Errorf("a shareable response in the window: %d %q %q", st, body, cs)
	}
	// (On the node that stored it: another node trusts its own pass
	// hint for up to a second more.)
	if st, body, cs := fetch(client, urls[1], "/p", "X-Req", "late"); st != 200 || body != "shared" || cs != "stampede; hit" {
		t.Errorf("after the window: %d %q %q, want the shared response, a hit", st, body, cs)
	}
}

// unstorableNotAmplified: a response the store cannot hold exactly (a
// header value with CR LF, as a handler echoing a query parameter writes)
// costs one handler call per request, however many arrive at once, and is
// never served from the cache.
func unstorableNotAmplified(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	const n = 30
	var calls atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("X-Echo", "a\r\nInjected: 1")
		fmt.Fprint(w, "body")
	})
	urls := servers(t, a, top, 1, guard.Options{}, Config{}, origin)
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if st, body, cs := fetch(client, urls[0], "/echo?v=x"); st != 200 || body != "body" || strings.Contains(cs, "hit") {
				t.Errorf("%d %q %q", st, body, cs)
			}
		})
	}
	wg.Wait()
	if got := calls.Load(); got > n {
		t.Errorf("%d handler calls for %d requests", got, n)
	}
	if st, _, cs := fetch(client, urls[0], "/echo?v=x"); st != 200 || cs != `stampede; fwd=miss; detail="header not storable"` {
		t.Errorf("Cache-Status %q", cs)
	}
}

// panicOnUnkeyedInput: requests whose unkeyed input makes the handler
// panic, sent beside normal requests to a cold URL on two servers, round
// after round (each on a URL of its own): every normal request gets the
// handler's 200.
func panicOnUnkeyedInput(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("User-Agent") == "evil" {
			panic("malformed user agent")
		}
		fmt.Fprint(w, "fine")
	})
	urls := servers(t, a, top, 2, guard.Options{}, Config{}, origin)
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	for round := range 10 {
		path := fmt.Sprint("/shop?round=", round)
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				if i%3 == 0 {
					fetch(client, urls[i%2], path, "User-Agent", "evil")
					return
				}
				if st, body, _ := fetch(client, urls[i%2], path, "User-Agent", "browser"); st != 200 || body != "fine" {
					t.Errorf("round %d: a normal client got %d %q", round, st, body)
				}
			})
		}
		wg.Wait()
	}
}

// work stands for a handler's own latency.
func work(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}

// slowFailuresOneAtATime: a cold URL whose handler fails slowly (a 502
// after longer than the guard's WaitTimeout, as a handler whose upstream
// hangs) is called at most twice at a time across the fleet: the first
// request's call, and one backup call fleet-wide for the requests that
// waited WaitTimeout for it (guard.BackupLoad: the first call's inputs do
// not decide their answer); once the URL is known to fail, its requests
// take turns, and those whose turn does not come get 503 with Retry-After
// instead of calling the handler themselves.
func slowFailuresOneAtATime(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var flight inFlight
	var calls atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer flight.enter()()
		calls.Add(1)
		work(400 * time.Millisecond)
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, r.Header.Get("X-Req"))
	})
	urls := servers(t, a, top, 2, guard.Options{WaitTimeout: 150 * time.Millisecond}, Config{}, origin)
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var busy int64
	for wave := range 2 {
		_, b := failingWave(t, client, urls, "/hanging", 12, fmt.Sprint("req-", wave, "-"))
		busy += b
	}
	if got := flight.max.Load(); got > 2 {
		t.Errorf("%d handler calls at once across the fleet (%d in all), want at most 2", got, calls.Load())
	}
	if busy == 0 {
		t.Error("no request waited past WaitTimeout: not exercised")
	}
}

// abandonedHandlerNotRerun: a handler call that runs past the guard's
// LoadTimeout (ignoring its request's context) is abandoned, and neither
// its request nor those that waited on it call the handler again while it
// may still run: its request gets 504, the others 504 or 503.
func abandonedHandlerNotRerun(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var flight inFlight
	var calls atomic.Int64
	var running sync.WaitGroup
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Done()
		defer flight.enter()()
		calls.Add(1)
		work(600 * time.Millisecond) // deaf to r.Context()
		fmt.Fprint(w, "late")
	})
	t.Cleanup(running.Wait) // before the leak check
	urls := servers(t, a, top, 2, guard.Options{LoadTimeout: 150 * time.Millisecond}, Config{}, origin)
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			st, body, _ := fetch(client, urls[i%2], "/report")
			if st != http.StatusGatewayTimeout && st != http.StatusServiceUnavailable {
				t.Errorf("request %d got %d %q, want 504 or 503", i, st, body)
			}
		})
	}
	wg.Wait()
	if got := calls.Load(); got != 1 {
		t.Errorf("%d handler calls (at most %d at once), want the one abandoned", got, flight.max.Load())
	}
}
