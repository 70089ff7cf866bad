package guardhttp_test

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// fetched is one response as a client read it over the network; err is
// set where the connection broke off.
type fetched struct {
	status  int
	body    string
	trailer http.Header
	cache   string
	err     error
}

func fetch(url string) fetched {
	resp, err := http.Get(url)
	if err != nil {
		return fetched{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fetched{status: resp.StatusCode, body: string(b), trailer: resp.Trailer, cache: resp.Header.Get("Cache-Status"), err: err}
}

// throughBoth serves h by net/http directly and through the middleware (a
// local tier on a real Redis), asks each n times at once, then the
// middleware once more; it returns what the clients read, and how many
// times the handler ran behind the middleware.
func throughBoth(t *testing.T, h http.HandlerFunc, n int) (direct, first []fetched, later fetched, calls int64) {
	t.Helper()
	quiet := func(h http.Handler) *httptest.Server {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics net/http logs
		srv.Start()
		return srv
	}
	dsrv := quiet(h)
	defer dsrv.Close()
	var ran atomic.Int64
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		h(w, r)
	})
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{LocalEntries: 1000})
	msrv := quiet(guardhttp.Middleware(g, guardhttp.Config{})(counted))
	defer msrv.Close()
	ask := func(url string) []fetched {
		out := make([]fetched, n)
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() { out[i] = fetch(url) })
		}
		wg.Wait()
		return out
	}
	direct = ask(dsrv.URL + "/x")
	first = ask(msrv.URL + "/x")
	later = fetch(msrv.URL + "/x")
	return direct, first, later, ran.Load()
}

// TestStatusNetHTTPRefuses: a status net/http refuses (below 100, above
// 999: it panics, and the client's connection breaks off) was taken for
// an interim response and dropped; the body's Write then made it a 200,
// stored and served to everyone. A 101 the handler wrote without
// switching protocols became a stored 200 too. Now the first panics as
// net/http's WriteHeader does, and a 101 is a final response, its
// request's alone.
func TestStatusNetHTTPRefuses(t *testing.T) {
	for _, code := range []int{0, -1, 99, 1000, http.StatusSwitchingProtocols} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			h := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=60")
				w.WriteHeader(code)
				_, _ = io.WriteString(w, "oops")
			}
			direct, first, later, _ := throughBoth(t, h, 5)
			want := direct[0]
			for _, got := range append(first, later) {
				if got.status == http.StatusOK || got.body == "oops" || got.cache != "" && strings.Contains(got.cache, "hit") {
					t.Fatalf("status %d: a client read %d %q (%s); net/http: %d, %v", code, got.status, got.body, got.cache, want.status, want.err)
				}
				if (got.err != nil) != (want.err != nil) || got.status != want.status {
					t.Errorf("status %d: a client read %d, %v; net/http: %d, %v", code, got.status, got.err, want.status, want.err)
				}
			}
		})
	}
}

// TestTrailersReachTheirClient: trailer fields (declared in Trailer, or
// named with http.TrailerPrefix), which a handler sets after its body,
// were lost, also for the request whose handler set them, and the
// response was stored without them. Now a response with trailers is
// passed, each request's handler answering it with its own trailers, as
// net/http sends them.
func TestTrailersReachTheirClient(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"declared": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Trailer", "X-Checksum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
		},
		"declared, private": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "private")
			w.Header().Set("Trailer", "X-Checksum")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
		},
		"prefix, streamed": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			_, _ = io.WriteString(w, strings.Repeat("x", 64<<10))
			w.Header().Set(http.TrailerPrefix+"X-Checksum", "abc")
		},
		"prefix, flushed": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			_, _ = io.WriteString(w, "body")
			_ = http.NewResponseController(w).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Checksum", "abc")
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			direct, first, later, _ := throughBoth(t, h, 5)
			if got := direct[0].trailer.Get("X-Checksum"); got != "abc" {
				t.Fatalf("net/http sent trailer %q; the case is wrong", got)
			}
			for i, got := range append(first, later) {
				if got.err != nil || got.status != http.StatusOK || got.body != direct[0].body || got.trailer.Get("X-Checksum") != "abc" {
					t.Errorf("client %d: %d, %d bytes, trailer %v, %v (%s); want net/http's trailer abc", i, got.status, len(got.body), got.trailer, got.err, got.cache)
				}
			}
		})
	}
}

// TestContentLengthAsNetHTTP: net/http frames a response by the
// Content-Length a handler declares only when it parses (strconv, no
// spaces) and no Transfer-Encoding is set, and fails a Write past it; the
// middleware trimmed spaces, and took every such response for an
// incomplete one: never stored, its handler called once per request in
// turn, and the requests that waited the WaitTimeout answered 503. Now the
// middleware reads the field as net/http does: every client reads what
// net/http sends, and one handler call fills the entry; a value net/http
// cannot read (it ignores it, but may send it) is passed, each request's
// handler answering it as net/http would.
func TestContentLengthAsNetHTTP(t *testing.T) {
	invalid := map[string]bool{"spaces": true, "not a number": true}
	cases := map[string]http.HandlerFunc{
		"spaces": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", " 100 ")
			_, _ = io.WriteString(w, strings.Repeat("x", 10))
		},
		"not a number": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "ten")
			_, _ = io.WriteString(w, strings.Repeat("x", 10))
		},
		"chunked too": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.Header().Set("Transfer-Encoding", "chunked")
			_, _ = io.WriteString(w, strings.Repeat("x", 10))
		},
		"zero, then a body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "0")
			_, _ = io.WriteString(w, "abc")
		},
		"a write past it": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "abcde")
			_, _ = io.WriteString(w, "fgh")
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			slow := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=60")
				h(w, r)
			}
			direct, first, later, calls := throughBoth(t, slow, 20)
			want := direct[0]
			if want.err != nil {
				t.Fatalf("net/http: %v; the case is wrong", want.err)
			}
			for i, got := range append(first, later) {
				if got.err != nil || got.status != want.status || got.body != want.body {
					t.Errorf("client %d: %d %q, %v (%s); net/http sent %d %q", i, got.status, got.body, got.err, got.cache, want.status, want.body)
				}
			}
			switch {
			case invalid[name]:
				if !strings.Contains(later.cache, "invalid Content-Length") {
					t.Errorf("the last of %d requests: %q; want it passed", calls, later.cache)
				}
			case calls != 1 || !strings.Contains(later.cache, "hit"):
				t.Errorf("%d handler calls for 21 requests, the last %q; want 1, and a hit", calls, later.cache)
			}
		})
	}
}

// TestStreamingClientLeaves: a client left while its handler streamed,
// and the handler, told by its context, set trailer fields as it ended.
// The request's goroutine read the handler's header for trailers while
// the handler still wrote it (a data race, found by
// TestAsNetHTTPGenerated under -race). Now nothing reads the capture of a
// handler still running: the client that left gets nothing more. Run with
// -race.
func TestStreamingClientLeaves(t *testing.T) {
	returned := make(chan struct{})
	flushed := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		w.Header().Set("Cache-Control", "private") // streamed once flushed
		_, _ = io.WriteString(w, "first")
		_ = http.NewResponseController(w).Flush()
		close(flushed)
		<-r.Context().Done()
		w.Header().Set(http.TrailerPrefix+"X-Late", "1")
		w.Header().Set("X-Other", "2")
	})
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{LocalEntries: 1000})
	srv := httptest.NewServer(guardhttp.Middleware(g, guardhttp.Config{})(h))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /leaves HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never flushed")
	}
	_ = conn.Close()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled when its client left")
	}
}
