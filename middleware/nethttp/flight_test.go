package guardhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/middleware/internal/httpcache"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// gate is closed once n requests have arrived in front of the middleware:
// the handler waits on it, so every request has been sent on to the guard
// before the handler answers. (The guard has no hook for "joined an
// in-process flight", so a request may still reach it after the flight
// ended; the assertions hold for either interleaving.)
type gate struct {
	n       int64
	arrived atomic.Int64
	open    chan struct{}
}

func newGate(n int) *gate { return &gate{n: int64(n), open: make(chan struct{})} }

// in counts the requests reaching h.
func (g *gate) in(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.arrived.Add(1) == g.n {
			close(g.open)
		}
		h.ServeHTTP(w, r)
	})
}

func (g *gate) wait(t testing.TB) {
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
		t.Errorf("only %d of %d requests arrived", g.arrived.Load(), g.n)
	}
}

// TestCoalescingAcrossServers: N concurrent requests for one cold route,
// spread over two servers (two Groups, two Redis clients, one real Redis),
// cost one handler call; one response says stored, the others collapsed.
func TestCoalescingAcrossServers(t *testing.T) {
	clients := map[string]func(t *testing.T) redis.UniversalClient{
		"standalone": func(t *testing.T) redis.UniversalClient { return redistest.Shared(t).Client(t) },
		"cluster":    func(t *testing.T) redis.UniversalClient { return redistest.SharedCluster(t).Client(t) },
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			const n = 40
			gt := newGate(n)
			ns := redistest.Key(t) + ":"
			o := &origin{serve: func(w http.ResponseWriter, r *http.Request, call int64) {
				gt.wait(t)
				fmt.Fprintf(w, "call %d", call)
			}}
			var urls []string
			for range 2 {
				g := newGroup(t, client(t), guard.Options{Namespace: ns})
				srv := httptest.NewServer(gt.in(guardhttp.Middleware(g, guardhttp.Config{})(o)))
				t.Cleanup(srv.Close)
				urls = append(urls, srv.URL)
			}
			type answer struct {
				body, status string
				err          error
			}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					// Both servers must see one Host, as behind one name.
					req, _ := http.NewRequest(http.MethodGet, urls[i%2]+"/route?a=1", nil)
					req.Host = "shop.example"
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						answers[i].err = err
						return
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					answers[i] = answer{string(b), resp.Header.Get("Cache-Status"), err}
				})
			}
			wg.Wait()
			http.DefaultClient.CloseIdleConnections()
			if got := o.calls.Load(); got != 1 {
				t.Errorf("handler calls %d, want 1", got)
			}
			stored := 0
			for i, a := range answers {
				switch {
				case a.err != nil:
					t.Errorf("request %d: %v", i, a.err)
				case a.body != "call 1":
					t.Errorf("request %d: body %q", i, a.body)
				case a.status == "stampede; fwd=miss; stored":
					stored++
				case a.status != "stampede; fwd=miss; collapsed" && a.status != "stampede; hit":
					t.Errorf("request %d: Cache-Status %q", i, a.status)
				}
			}
			if stored != 1 {
				t.Errorf("%d responses say stored, want 1", stored)
			}
		})
	}
}

// TestFollowersRunTheirOwnHandler: when the response of a coalesced flight
// is not shareable, every request gets a handler run of its own; no
// request ever receives the cookie set for another.
func TestFollowersRunTheirOwnHandler(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter, id string){
		"Set-Cookie": func(w http.ResponseWriter, id string) {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: id})
			fmt.Fprint(w, id)
		},
		"private": func(w http.ResponseWriter, id string) {
			w.Header().Set("Cache-Control", "private")
			fmt.Fprint(w, id)
		},
		"500": func(w http.ResponseWriter, id string) {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, id)
		},
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			const n = 20
			gt := newGate(n)
			var coalesced atomic.Int64
			g := miniGroup(t, guard.Options{Hooks: guard.Hooks{Coalesced: func(string) { coalesced.Add(1) }}})
			o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
				gt.wait(t)
				answer(w, r.Header.Get("X-Req"))
			}}
			h := gt.in(guardhttp.Middleware(g, guardhttp.Config{})(o))
			recs := make([]*httptest.ResponseRecorder, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					recs[i] = serve(h, with(get("/a"), header("X-Req", fmt.Sprint(i))))
				})
			}
			wg.Wait()
			if got := o.calls.Load(); got != n {
				t.Errorf("handler calls %d, want %d (one per request)", got, n)
			}
			if coalesced.Load() == 0 {
				t.Errorf("no request was coalesced: the rule was not exercised")
			}
			for i, rec := range recs {
				id := fmt.Sprint(i)
				if rec.Body.String() != id {
					t.Errorf("request %d got the body of request %q", i, rec.Body)
				}
				if c := rec.Header().Get("Set-Cookie"); c != "" && c != "session="+id {
					t.Errorf("request %d got cookie %q", i, c)
				}
			}
		})
	}
}

// TestLeaderDisconnect: the client whose request runs the handler leaves;
// the handler keeps running with a live context and the requests coalesced
// with it get its response.
func TestLeaderDisconnect(t *testing.T) {
	noLeaks(t)
	const followers = 5
	gt := newGate(1 + followers)
	g := miniGroup(t, guard.Options{})
	started, release := make(chan struct{}), make(chan struct{})
	handlerCtxErr := make(chan error, 1)
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
		close(started)
		gt.wait(t)
		<-release
		handlerCtxErr <- r.Context().Err()
		fmt.Fprint(w, "shared")
	}}
	h := gt.in(guardhttp.Middleware(g, guardhttp.Config{})(o))

	ctx, cancel := context.WithCancel(context.Background())
	leaderDone := make(chan *httptest.ResponseRecorder)
	go func() { leaderDone <- serve(h, get("/a").WithContext(ctx)) }()
	<-started
	recs := make([]*httptest.ResponseRecorder, followers)
	var wg sync.WaitGroup
	for i := range followers {
		wg.Go(func() { recs[i] = serve(h, get("/a")) })
	}
	gt.wait(t)
	cancel()
	if rec := <-leaderDone; rec.Body.Len() != 0 {
		t.Errorf("gone client was written %q", rec.Body)
	}
	close(release)
	wg.Wait()
	if err := <-handlerCtxErr; err != nil {
		t.Errorf("handler context: %v, want live after its client left", err)
	}
	for i, rec := range recs {
		if rec.Code != 200 || rec.Body.String() != "shared" {
			t.Errorf("follower %d: %d %q", i, rec.Code, rec.Body)
		}
	}
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls %d, want 1", got)
	}
}

// TestHandlerPanic: a panic answers 500 to the callers of its flight and
// the process survives; the next request while the guard backs off the key
// gets 503; http.ErrAbortHandler is re-panicked for net/http.
func TestHandlerPanic(t *testing.T) {
	noLeaks(t)
	g := miniGroup(t, guard.Options{ErrorBackoff: time.Hour})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		panic("boom")
	}}
	h := guardhttp.Middleware(g, guardhttp.Config{})(o)
	if rec := serve(h, get("/boom")); rec.Code != http.StatusInternalServerError {
		t.Errorf("panic answered %d, want 500", rec.Code)
	}
	if rec := serve(h, get("/boom")); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("during back-off: %d %v, want 503 with Retry-After", rec.Code, rec.Header())
	}
	func() {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Errorf("recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		serve(h, get("/abort"))
	}()
	if got := o.calls.Load(); got != 2 {
		t.Errorf("handler calls %d, want 2", got)
	}
}

// TestLargeBodyStreams: a body over MaxBodyBytes reaches the client while
// the handler is still writing it (it is not buffered whole: memory stays
// bounded), complete, and is not stored; with or without a Flush from the
// handler.
func TestLargeBodyStreams(t *testing.T) {
	const limit, chunk = 1 << 10, 64 << 10
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush=%v", flush), func(t *testing.T) {
			noLeaks(t)
			g := miniGroup(t, guard.Options{})
			proceed := make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(proceed) }) }
			o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
				_, _ = w.Write([]byte(strings.Repeat("a", chunk)))
				if flush {
					w.(http.Flusher).Flush()
				}
				<-proceed
				_, _ = w.Write([]byte(strings.Repeat("b", chunk)))
			}}
			srv := httptest.NewServer(guardhttp.Middleware(g, guardhttp.Config{MaxBodyBytes: limit})(o))
			t.Cleanup(srv.Close)
			t.Cleanup(release) // first: a failed test's handler returns
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
			t.Cleanup(client.CloseIdleConnections)
			// Without a Flush, net/http itself holds a few KB back.
			early := chunk / 2
			for range 2 {
				resp, err := client.Get(srv.URL + "/big")
				if err != nil {
					t.Fatal(err)
				}
				first := make([]byte, early)
				if _, err := io.ReadFull(resp.Body, first); err != nil || strings.Trim(string(first), "a") != "" {
					t.Fatalf("reading %d bytes while the handler waits: %v", early, err)
				}
				release()
				rest, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := strings.Repeat("a", chunk-early) + strings.Repeat("b", chunk); err != nil || string(rest) != want {
					t.Fatalf("rest: %d bytes, %v; want %d", len(rest), err, len(want))
				}
				if cs := resp.Header.Get("Cache-Status"); cs != "stampede; fwd=miss" {
					t.Errorf("Cache-Status %q", cs)
				}
			}
			if got := o.calls.Load(); got != 2 {
				t.Errorf("handler calls %d, want 2 (never stored)", got)
			}
		})
	}
}

// TestPanicWhileStreaming: a handler that panics after part of its
// response went out (a body over MaxBodyBytes) aborts the connection, so
// the client sees a truncated response rather than a complete one; the
// server goes on serving.
func TestPanicWhileStreaming(t *testing.T) {
	noLeaks(t)
	g := miniGroup(t, guard.Options{})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.URL.Path == "/ok" {
			fmt.Fprint(w, "ok")
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("a", 4<<10)))
		panic("boom")
	}}
	srv := httptest.NewServer(guardhttp.Middleware(g, guardhttp.Config{MaxBodyBytes: 1 << 10})(o))
	t.Cleanup(srv.Close)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(srv.URL + "/boom")
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			t.Errorf("got a complete %d response of %d bytes, want it cut short", resp.StatusCode, len(b))
		}
	}
	resp, err = client.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("after the panic: %q", b)
	}
}

// TestGarbageEntry: an entry that does not decode is a miss: the handler
// runs, and its response replaces the garbage.
func TestGarbageEntry(t *testing.T) {
	g := miniGroup(t, guard.Options{})
	req := get("/a")
	key := httpcache.DeriveKey(req, nil)
	for _, garbage := range []string{"", "garbage", "shr\x01\xc8\x01", "shr\x01\xc8\x01\x01\x0aSet-Cookie\x01\x01x\x00"} {
		if err := g.Invalidate(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return []byte(garbage), nil }); err != nil {
			t.Fatal(err)
		}
		o := &origin{}
		h := guardhttp.Middleware(g, guardhttp.Config{})(o)
		if rec := serve(h, get("/a")); rec.Code != 200 || rec.Body.String() != "call 1 GET /a" || rec.Header().Get("Set-Cookie") != "" {
			t.Errorf("garbage %q: %d %q %v", garbage, rec.Code, rec.Body, rec.Header())
		}
		if rec := serve(h, get("/a")); rec.Header().Get("Cache-Status") != "stampede; hit" {
			t.Errorf("garbage %q was not replaced: %v", garbage, rec.Header())
		}
		if got := o.calls.Load(); got != 1 {
			t.Errorf("garbage %q: handler calls %d, want 1", garbage, got)
		}
	}
}

// The guard serves hits of keys it recently saw fresh by estimating the
// Redis clock from its own monotonic clock, so a jump of miniredis's clock
// is seen by a Group that has not read the key yet: each step after a jump
// runs on a new node (a new Group on the same Redis and namespace).

// TestStale: past its fresh window a response is served stale at once
// while one background handler call refreshes it.
func TestStale(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	ns := redistest.Key(t) + ":"
	refreshed := make(chan struct{})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
		fmt.Fprintf(w, "v%d", n)
		if n == 2 {
			defer close(refreshed)
		}
	}}
	node := func() (*guard.Group, http.Handler) {
		g := newGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Minute, StaleFor: time.Hour, Jitter: guard.Disabled})
		return g, guardhttp.Middleware(g, guardhttp.Config{})(o)
	}
	_, h1 := node()
	serve(h1, get("/a"))
	mr.SetTime(now.Add(2 * time.Minute))
	g2, h2 := node()
	rec := serve(h2, get("/a"))
	if rec.Body.String() != "v1" || rec.Header().Get("Cache-Status") != "stampede; fwd=stale" || rec.Header().Get("Age") != "120" {
		t.Errorf("stale answer: %q %v", rec.Body, rec.Header())
	}
	select {
	case <-refreshed:
	case <-time.After(10 * time.Second):
		t.Fatal("no background refresh")
	}
	if err := g2.Close(); err != nil { // waits for the refresh's fill
		t.Fatal(err)
	}
	if got := o.calls.Load(); got != 2 {
		t.Errorf("handler calls %d, want 2", got)
	}
	if rec := serve(h1, get("/a")); rec.Body.String() != "v2" {
		t.Errorf("after the refresh: %q, want v2", rec.Body)
	}
}

// TestUpstreamWindows: with UpstreamWindows, max-age sets the fresh window
// of the very response that carries it (guard.SetWindows), and a response
// is never served past its max-age although the guard's own windows are an
// hour.
func TestUpstreamWindows(t *testing.T) {
	mr, rdb := redistest.Mini(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	ns := redistest.Key(t) + ":"
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.URL.Path == "/zero" {
			w.Header().Set("Cache-Control", "max-age=0")
		} else {
			w.Header().Set("Cache-Control", "max-age=10")
		}
		fmt.Fprintf(w, "v%d", n)
	}}
	node := func() http.Handler {
		g := newGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Hour, StaleFor: time.Hour, Jitter: guard.Disabled})
		return guardhttp.Middleware(g, guardhttp.Config{UpstreamWindows: true})(o)
	}
	h := node()
	steps := []struct {
		h         http.Handler
		at        time.Duration
		wantBody  string
		wantCalls int64
	}{
		{h, 0, "v1", 1},                     // stored for its max-age=10, no stale window
		{h, 0, "v1", 1},                     // a hit
		{h, 5 * time.Second, "v1", 1},       // fresh
		{node(), 11 * time.Second, "v2", 2}, // past max-age: loaded again, not served
	}
	for i, s := range steps {
		mr.SetTime(now.Add(s.at))
		rec := serve(s.h, get("/a"))
		if rec.Body.String() != s.wantBody || o.calls.Load() != s.wantCalls {
			t.Errorf("step %d (+%v): body %q, calls %d; want %q, %d", i, s.at, rec.Body, o.calls.Load(), s.wantBody, s.wantCalls)
		}
	}
	o.calls.Store(0)
	for range 3 { // max-age=0: none stores
		serve(h, get("/zero"))
	}
	if got := o.calls.Load(); got != 3 {
		t.Errorf("max-age=0: handler calls %d, want 3 (never stored)", got)
	}
}

// TestStaleServedWhileRefreshFails: a request served stale wins the
// refresh, which runs its handler in the background; the handler answers
// 5xx (or any response that is not shared) at once. The request must get
// the stale response, not the refresh's answer (stale-if-error), whichever
// of the two finishes first. The guard's Stale hook runs on the request's
// goroutine after the refresh started and before the guard answers, so
// holding it until the refresh's handler returned forces the interleaving
// in which the refresh finishes first.
func TestStaleServedWhileRefreshFails(t *testing.T) {
	refreshes := map[string]func(http.ResponseWriter){
		"503": func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "down")
		},
		"Set-Cookie": func(w http.ResponseWriter) {
			w.Header().Set("Set-Cookie", "s=1")
			fmt.Fprint(w, "cookie")
		},
	}
	for name, refresh := range refreshes {
		t.Run(name, func(t *testing.T) {
			mr, rdb := redistest.Mini(t)
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			mr.SetTime(now)
			ns := redistest.Key(t) + ":"
			answered := make(chan struct{})
			o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
				if n == 1 {
					fmt.Fprint(w, "v1")
					return
				}
				defer close(answered)
				refresh(w)
			}}
			opts := guard.Options{Namespace: ns, FreshFor: time.Minute, StaleFor: time.Hour, Jitter: guard.Disabled}
			h1 := guardhttp.Middleware(newGroup(t, rdb, opts), guardhttp.Config{})(o)
			serve(h1, get("/a"))

			mr.SetTime(now.Add(2 * time.Minute)) // stale, seen by a new node
			opts.Hooks.Stale = func(string, time.Duration) {
				select {
				case <-answered:
				case <-time.After(10 * time.Second):
					t.Error("the refresh's handler did not answer")
				}
			}
			g2 := newGroup(t, rdb, opts)
			rec := serve(guardhttp.Middleware(g2, guardhttp.Config{})(o), get("/a"))
			if rec.Code != 200 || rec.Body.String() != "v1" || rec.Header().Get("Set-Cookie") != "" {
				t.Errorf("got %d %q %v, want the stale 200 v1", rec.Code, rec.Body, rec.Header())
			}
			if got := rec.Header().Get("Cache-Status"); got != "stampede; fwd=stale" {
				t.Errorf("Cache-Status %q, want fwd=stale", got)
			}
			if err := g2.Close(); err != nil { // waits for the refresh
				t.Fatal(err)
			}
			if got := o.calls.Load(); got != 2 {
				t.Errorf("handler calls %d, want 2", got)
			}
		})
	}
}

// TestPanicFollowers: the requests coalesced with a panicking handler call
// get a 500 too (or, arriving after it, a 503 while the guard backs off
// the key), never a handler run of their own, and the process survives.
func TestPanicFollowers(t *testing.T) {
	noLeaks(t)
	const n = 10
	gt := newGate(n)
	var coalesced atomic.Int64
	g := miniGroup(t, guard.Options{ErrorBackoff: time.Hour, Hooks: guard.Hooks{Coalesced: func(string) { coalesced.Add(1) }}})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		gt.wait(t)
		panic("boom")
	}}
	h := gt.in(guardhttp.Middleware(g, guardhttp.Config{})(o))
	recs := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { recs[i] = serve(h, get("/a")) })
	}
	wg.Wait()
	if got := o.calls.Load(); got != 1 {
		t.Errorf("handler calls %d, want 1", got)
	}
	if coalesced.Load() == 0 {
		t.Errorf("no request was coalesced: the rule was not exercised")
	}
	for i, rec := range recs {
		if rec.Code != http.StatusInternalServerError && rec.Code != http.StatusServiceUnavailable {
			t.Errorf("request %d: %d %q, want 500 (or 503 after the flight)", i, rec.Code, rec.Body)
		}
	}
}

// TestEventStream: a server-sent event stream (a request without Accept:
// text/event-stream, so the response decides) reaches the client as the
// handler flushes it: the headers on the first flush, each event on its
// own, while the handler is still running; it is never stored.
func TestEventStream(t *testing.T) {
	noLeaks(t)
	g := miniGroup(t, guard.Options{})
	step := make(chan struct{})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		f.Flush() // headers only
		<-step
		fmt.Fprint(w, "data: 1\n\n")
		f.Flush()
		<-step
		fmt.Fprint(w, "data: 2\n\n")
	}}
	srv := httptest.NewServer(guardhttp.Middleware(g, guardhttp.Config{})(o))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(step) }) // first: a failed test's handler returns
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	for range 2 {
		resp, err := client.Get(srv.URL + "/events")
		if err != nil {
			t.Fatalf("headers before the first event: %v", err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		step <- struct{}{}
		first := make([]byte, len("data: 1\n\n"))
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: 1\n\n" {
			t.Fatalf("first event while the handler runs: %q, %v", first, err)
		}
		step <- struct{}{}
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(rest) != "data: 2\n\n" {
			t.Fatalf("second event: %q, %v", rest, err)
		}
	}
	if got := o.calls.Load(); got != 2 {
		t.Errorf("handler calls %d, want 2 (never stored)", got)
	}
}
