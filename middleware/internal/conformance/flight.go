package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// coalescingAcrossServers: N concurrent requests for one cold route,
// spread over two servers (two Groups, two Redis clients, one Redis), cost
// one handler call; one response says stored, the others collapsed.
func coalescingAcrossServers(t *testing.T, a Adapter, top topology) {
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
		g := NewGroup(t, top.client(t), guard.Options{Namespace: ns})
		srv := httptest.NewServer(gt.in(a.New(g, Config{}, o)))
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
	for i, ans := range answers {
		switch {
		case ans.err != nil:
			t.Errorf("request %d: %v", i, ans.err)
		case ans.body != "call 1":
			t.Errorf("request %d: body %q", i, ans.body)
		case ans.status == "stampede; fwd=miss; stored":
			stored++
		case ans.status != "stampede; fwd=miss; collapsed" && ans.status != "stampede; hit":
			t.Errorf("request %d: Cache-Status %q", i, ans.status)
		}
	}
	if stored != 1 {
		t.Errorf("%d responses say stored, want 1", stored)
	}
}

// followersRunTheirOwnHandler: when the response of a coalesced flight
// is not shareable, every request gets a handler run of its own; no
// request ever receives the body or cookie produced for another. A
// failure (a 5xx) makes the waiting requests take turns, one handler call
// at a time; a response that is private for reasons of its own (a cookie,
// Cache-Control: private) marks the URL pass, and the requests run at once.
func followersRunTheirOwnHandler(t *testing.T, a Adapter, top topology) {
	cases := map[string]struct {
		answer func(w http.ResponseWriter, id string)
		turns  bool // at most one handler call at a time
	}{
		"Set-Cookie": {answer: func(w http.ResponseWriter, id string) {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: id})
			fmt.Fprint(w, id)
		}},
		"private": {answer: func(w http.ResponseWriter, id string) {
			w.Header().Set("Cache-Control", "private")
			fmt.Fprint(w, id)
		}},
		"500": {answer: func(w http.ResponseWriter, id string) {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, id)
		}, turns: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			noLeaks(t)
			const n = 20
			gt := newGate(n)
			g := NewGroup(t, top.client(t), guard.Options{WaitTimeout: time.Minute})
			var running, maxRun atomic.Int64
			o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
				gt.wait(t)
				r1 := running.Add(1)
				defer running.Add(-1)
				for m := maxRun.Load(); r1 > m && !maxRun.CompareAndSwap(m, r1); m = maxRun.Load() {
				}
				tc.answer(w, r.Header.Get("X-Req"))
			}}
			h := gt.in(a.New(g, Config{}, o))
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
			if got := maxRun.Load(); tc.turns && got != 1 {
				t.Errorf("%d handler calls at once, want 1 (turns)", got)
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

// leaderDisconnect: the client whose request runs the handler leaves;
// the handler keeps running with a live context and the requests coalesced
// with it get its response.
func leaderDisconnect(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	const followers = 5
	gt := newGate(1 + followers)
	g := NewGroup(t, top.client(t), guard.Options{})
	started, release := make(chan struct{}), make(chan struct{})
	handlerCtxErr := make(chan error, 1)
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, n int64) {
		close(started)
		gt.wait(t)
		<-release
		handlerCtxErr <- r.Context().Err()
		fmt.Fprint(w, "shared")
	}}
	h := gt.in(a.New(g, Config{}, o))

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

// handlerPanic: a panic answers only its own request, as the handler
// would have without the middleware: it is panicked again on the request's
// goroutine with its value (http.ErrAbortHandler included), nothing is
// stored, and the next request runs the handler itself (no back-off
// decided by another request's panic).
func handlerPanic(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	g := NewGroup(t, top.client(t), guard.Options{ErrorBackoff: time.Hour})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
		if r.Header.Get("X-Bad") != "" {
			panic("boom")
		}
		fmt.Fprint(w, "fine")
	}}
	h := a.New(g, Config{}, o)
	if p := recovered(h, with(get("/boom"), header("X-Bad", "1"))); p != "boom" {
		t.Errorf("recovered %v, want the handler's own panic", p)
	}
	if rec := serve(h, get("/boom")); rec.Code != http.StatusOK || rec.Body.String() != "fine" {
		t.Errorf("the next request: %d %q, want its own handler's 200", rec.Code, rec.Body)
	}
	if p := recovered(h, get("/abort")); p != http.ErrAbortHandler {
		t.Errorf("recovered %v, want http.ErrAbortHandler", p)
	}
	if got := o.calls.Load(); got != 3 {
		t.Errorf("handler calls %d, want 3", got)
	}
}

// handlerGoexit: a handler that calls runtime.Goexit (a helper giving up
// as t.FailNow does) ends its own request as it would without the
// middleware, its goroutine ending, and no other: the requests coalesced
// with its call take their turn at the handler and share the next answer
// (2 handler calls), and a later request is served (no back-off decided
// by another request's Goexit).
func handlerGoexit(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	const n = 8
	gt := newGate(n)
	g := NewGroup(t, top.client(t), guard.Options{ErrorBackoff: time.Hour, WaitTimeout: time.Minute})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.URL.Path == "/a" {
			gt.wait(t)
		}
		if call == 1 || r.Header.Get("X-Bad") != "" {
			runtime.Goexit()
		}
		fmt.Fprintf(w, "call %d", call)
	}}
	h := gt.in(a.New(g, Config{}, o))
	ended := make([]bool, n)
	recs := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			recs[i] = httptest.NewRecorder()
			ended[i] = goexited(h, get("/a"), recs[i])
		})
	}
	wg.Wait()
	var out, served int
	for i := range n {
		switch {
		case ended[i]:
			out++
		case recs[i].Code == http.StatusOK && recs[i].Body.String() == "call 2":
			served++
		default:
			t.Errorf("request %d: %d %q, want the second call's 200", i, recs[i].Code, recs[i].Body)
		}
	}
	if out != 1 || served != n-1 {
		t.Errorf("%d requests ended by Goexit and %d served the second call, want 1 and %d", out, served, n-1)
	}
	if got := o.calls.Load(); got != 2 {
		t.Errorf("handler calls %d, want 2", got)
	}
	rec := httptest.NewRecorder()
	if !goexited(h, with(get("/b"), header("X-Bad", "1")), rec) {
		t.Errorf("a request whose handler calls Goexit: %d %q, want its goroutine ended", rec.Code, rec.Body)
	}
	if rec := serve(h, get("/b")); rec.Code != http.StatusOK || rec.Body.String() != "call 4" {
		t.Errorf("the next request: %d %q [%s], want its own handler's 200", rec.Code, rec.Body, rec.Header().Get("Cache-Status"))
	}
}

// panicFollowers: requests coalesced with a panicking handler call never
// get its panic: each takes its turn at the handler (one call at a time),
// and its own call's answer, a panic of its own here, is its answer.
func panicFollowers(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	const n = 10
	gt := newGate(n)
	g := NewGroup(t, top.client(t), guard.Options{ErrorBackoff: time.Hour, WaitTimeout: time.Minute})
	var running, maxRun atomic.Int64
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		gt.wait(t)
		r1 := running.Add(1)
		defer running.Add(-1)
		for m := maxRun.Load(); r1 > m && !maxRun.CompareAndSwap(m, r1); m = maxRun.Load() {
		}
		panic("boom " + r.Header.Get("X-Req"))
	}}
	h := gt.in(a.New(g, Config{}, o))
	panics := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { panics[i] = recovered(h, with(get("/a"), header("X-Req", fmt.Sprint(i)))) })
	}
	wg.Wait()
	if got := o.calls.Load(); got != n {
		t.Errorf("handler calls %d, want %d (one per request)", got, n)
	}
	if got := maxRun.Load(); got != 1 {
		t.Errorf("%d handler calls at once, want 1", got)
	}
	for i, p := range panics {
		if want := fmt.Sprintf("boom %d", i); p != want {
			t.Errorf("request %d: recovered %v, want %q", i, p, want)
		}
	}
}
