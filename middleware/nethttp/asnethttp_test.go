package guardhttp_test

import (
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// script is a handler made from a seed: the fields it sets, the status it
// writes, its body in pieces, a flush, trailers set after the body, and how
// it ends.
type script struct {
	cacheControl  string // "" for none
	contentLength string // "" for none; "exact" for the body's length
	clDelta       int    // added to the exact length
	te            string // Transfer-Encoding, "" for none
	declare       bool   // Trailer: X-T
	interim       bool   // a 103 first
	status        int    // 0: no WriteHeader call
	pieces        []int
	flushAfter    int // flush after this many pieces, -1 never
	trailerT      bool
	trailerP      bool // http.TrailerPrefix + "X-P"
	panics        bool
}

func (s script) String() string {
	type fields script // without this method
	return fmt.Sprintf("%+v", fields(s))
}

func genScript(r *rand.Rand) script {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	s := script{
		cacheControl:  pick("max-age=60", "max-age=60", "private", "no-store", ""),
		contentLength: pick("", "", "exact", "exact", " 7 ", "ten", "0", "+3"),
		te:            pick("", "", "", "chunked", "identity"),
		declare:       r.IntN(4) == 0,
		interim:       r.IntN(8) == 0,
		status:        []int{0, 0, 200, 203, 404, 500, 204, 101, 99, 1000}[r.IntN(10)],
		flushAfter:    -1,
		trailerT:      r.IntN(3) == 0,
		trailerP:      r.IntN(4) == 0,
		panics:        r.IntN(10) == 0,
	}
	if s.contentLength == "exact" {
		s.clDelta = []int{0, 0, 0, -1, 2}[r.IntN(5)]
	}
	for range r.IntN(4) {
		s.pieces = append(s.pieces, []int{0, 3, 100, 3000, 70 << 10}[r.IntN(5)])
	}
	if len(s.pieces) > 0 && r.IntN(4) == 0 {
		s.flushAfter = r.IntN(len(s.pieces))
	}
	return s
}

func (s script) serve(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	total := 0
	for _, n := range s.pieces {
		total += n
	}
	if s.cacheControl != "" {
		h.Set("Cache-Control", s.cacheControl)
	}
	switch s.contentLength {
	case "":
	case "exact":
		h.Set("Content-Length", strconv.Itoa(total+s.clDelta))
	default:
		h.Set("Content-Length", s.contentLength)
	}
	if s.te != "" {
		h.Set("Transfer-Encoding", s.te)
	}
	if s.declare {
		h.Set("Trailer", "X-T")
	}
	if s.interim {
		w.WriteHeader(http.StatusEarlyHints)
	}
	if s.status != 0 {
		w.WriteHeader(s.status)
	}
	for i, n := range s.pieces {
		_, _ = w.Write([]byte(strings.Repeat(string(rune('a'+i)), n)))
		if i == s.flushAfter {
			_ = http.NewResponseController(w).Flush()
		}
	}
	if s.trailerT {
		h.Set("X-T", "t")
	}
	if s.trailerP {
		h.Set(http.TrailerPrefix+"X-P", "p")
	}
	if s.panics {
		panic("script")
	}
}

// same reports whether two responses read the same to a client: both
// broke off, or the same status, body and trailer fields.
func same(a, b fetched) bool {
	if (a.err != nil) != (b.err != nil) {
		return false
	}
	return a.err != nil || a.status == b.status && a.body == b.body &&
		a.trailer.Get("X-T") == b.trailer.Get("X-T") && a.trailer.Get("X-P") == b.trailer.Get("X-P")
}

// TestAsNetHTTPGenerated: for handlers generated from seeds (odd
// Content-Lengths, Transfer-Encodings, statuses net/http refuses, interim
// responses, flushes, trailers, panics), a client reads through the
// middleware what it reads from net/http serving the handler directly: on
// the request that runs the handler, and on the next, which may be served
// from the entry. The faults TestStatusNetHTTPRefuses,
// TestTrailersReachTheirClient and TestContentLengthAsNetHTTP keep are of
// this kind; this looks for more.
func TestAsNetHTTPGenerated(t *testing.T) {
	var (
		mu      sync.Mutex
		scripts = map[string]script{}
	)
	byPath := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := scripts[r.URL.Path]
		mu.Unlock()
		s.serve(w, r)
	})
	quiet := func(h http.Handler) *httptest.Server {
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	direct := quiet(byPath)
	calls := map[string]int{} // of the handler behind the middleware
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.URL.Path]++
		mu.Unlock()
		byPath(w, r)
	})
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{LocalEntries: 1000})
	cached := quiet(guardhttp.Middleware(g, guardhttp.Config{})(counted))
	n := 400
	if testing.Short() {
		n = 100
	}
	failed := 0
	for seed := range uint64(n) {
		s := genScript(rand.New(rand.NewPCG(seed, 1)))
		path := fmt.Sprintf("/case/%d", seed)
		mu.Lock()
		scripts[path] = s
		mu.Unlock()
		want := fetch(direct.URL + path)
		asked := 0
		for range 2 {
			asked++
			got := fetch(cached.URL + path)
			// A panic aborts the client's connection. net/http may first
			// send what its connection's buffer held (all of a response a
			// Content-Length frames, when the handler wrote past net/http's
			// own buffer); the middleware sends what the handler flushed,
			// no more: a panic is a failure. (A response its connection's
			// close delimits reads whole either way.)
			cut := s.panics && (got.err != nil || got.status == want.status && strings.HasPrefix(want.body, got.body))
			if !same(got, want) && !cut {
				t.Errorf("seed %d, request %d: %d %d bytes, trailer %v, %v (%s); net/http: %d %d bytes, trailer %v, %v\n\t%v",
					seed, asked, got.status, len(got.body), got.trailer, got.err, got.cache, want.status, len(want.body), want.trailer, want.err, s)
				failed++
				break
			}
		}
		mu.Lock()
		ran := calls[path]
		mu.Unlock()
		// (More runs than requests: the client retries a GET whose reused
		// connection broke off before a response.)
		if s.panics && ran < asked {
			t.Errorf("seed %d: a panicking handler ran %d times for %d requests: its response was served again\n\t%v", seed, ran, asked, s)
			failed++
		}
		if failed >= 5 {
			t.Fatal("stopping after 5 seeds")
		}
	}
}
