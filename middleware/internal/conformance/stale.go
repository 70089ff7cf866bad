package conformance

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The guard serves hits of keys it recently saw fresh by estimating the
// Redis clock from its own monotonic clock, so a jump of miniredis's clock
// is seen by a Group that has not read the key yet: each step after a jump
// runs on a new node (a new Group on the same Redis and namespace).

// stale: past its fresh window a response is served stale at once
// while one background handler call refreshes it.
func stale(t *testing.T, a Adapter) {
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
		g := NewGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Minute, StaleFor: time.Hour, Jitter: guard.Disabled})
		return g, a.New(g, Config{}, o)
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

// staleServedWhileRefreshFails: a request served stale wins the
// refresh, which runs its handler in the background; the handler answers
// 5xx (or any response that is not shared) at once. The request must get
// the stale response, not the refresh's answer (stale-if-error), whichever
// of the two finishes first. The guard's Stale hook runs on the request's
// goroutine after the refresh started and before the guard answers, so
// holding it until the refresh's handler returned forces the interleaving
// in which the refresh finishes first.
func staleServedWhileRefreshFails(t *testing.T, a Adapter) {
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
			h1 := a.New(NewGroup(t, rdb, opts), Config{}, o)
			serve(h1, get("/a"))

			mr.SetTime(now.Add(2 * time.Minute)) // stale, seen by a new node
			opts.Hooks.Stale = func(string, time.Duration) {
				select {
				case <-answered:
				case <-time.After(10 * time.Second):
					t.Error("the refresh's handler did not answer")
				}
			}
			g2 := NewGroup(t, rdb, opts)
			rec := serve(a.New(g2, Config{}, o), get("/a"))
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

// upstreamWindows: with UpstreamWindows, max-age sets the fresh window of
// the very response that carries it (guard.SetWindows), and a response is
// never served past its max-age although the guard's own windows are an
// hour.
func upstreamWindows(t *testing.T, a Adapter) {
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
		g := NewGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: time.Hour, StaleFor: time.Hour, Jitter: guard.Disabled})
		return a.New(g, Config{UpstreamWindows: true}, o)
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
