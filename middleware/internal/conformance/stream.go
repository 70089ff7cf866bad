package conformance

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// largeBodyStreams: a body over MaxBodyBytes reaches the client while
// the handler is still writing it (it is not buffered whole: memory stays
// bounded), complete, and is not stored; with or without a Flush from the
// handler.
func largeBodyStreams(t *testing.T, a Adapter, top topology) {
	const limit, chunk = 1 << 10, 64 << 10
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush=%v", flush), func(t *testing.T) {
			noLeaks(t)
			g := NewGroup(t, top.client(t), guard.Options{})
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
			srv := httptest.NewServer(a.New(g, Config{MaxBodyBytes: limit}, o))
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
				if cs := resp.Header.Get("Cache-Status"); cs != `stampede; fwd=miss; detail="body over MaxBodyBytes"` {
					t.Errorf("Cache-Status %q", cs)
				}
			}
			if got := o.calls.Load(); got != 2 {
				t.Errorf("handler calls %d, want 2 (never stored)", got)
			}
		})
	}
}

// panicWhileStreaming: a handler that panics after part of its
// response went out (a body over MaxBodyBytes) aborts the connection, so
// the client sees a truncated response rather than a complete one; the
// server goes on serving.
func panicWhileStreaming(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	g := NewGroup(t, top.client(t), guard.Options{})
	o := &origin{serve: func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.URL.Path == "/ok" {
			fmt.Fprint(w, "ok")
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("a", 4<<10)))
		panic("boom")
	}}
	srv := httptest.NewServer(a.New(g, Config{MaxBodyBytes: 1 << 10}, o))
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

// eventStream: a server-sent event stream (a request without Accept:
// text/event-stream, so the response decides) reaches the client as the
// handler flushes it: the headers on the first flush, each event on its
// own, while the handler is still running; it is never stored.
func eventStream(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	g := NewGroup(t, top.client(t), guard.Options{})
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
	srv := httptest.NewServer(a.New(g, Config{}, o))
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
