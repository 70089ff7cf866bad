package conformance

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// The transparency property (DESIGN guarantee 9), as a test that makes its
// own cases: a generated handler behaviour is served to a generated
// sequence of requests twice, straight (the handler alone on net/http) and
// through an adapter's middleware (miss, then hits, then past the fresh
// window). Every answer through the middleware must be either
//
//   - what the same request gets straight (status, body bytes, header
//     fields apart from Age, Cache-Status, Date, the framing fields and the
//     hop-by-hop ones; a broken response stays broken), or
//   - for an answer from the cache (hit, stale, collapsed, stored): a
//     response the test's own rules judge shareable, exactly as the
//     handler answers an unconditional GET, with the request's
//     preconditions applied to it.
//
// The rules of "shareable" here are written from the package docs and RFC
// 9111, not read from the engine, so that the engine storing something it
// should not (a 5xx, a truncated body, a cookie, a header it cannot read
// back) is caught. Findings of the outside review are kept as seeds
// (testdata/fuzz/FuzzTransparency in the net/http adapter's package).

var (
	transparencyCases = flag.Int("transparency.cases", 150, "cases of the transparency property per adapter")
	transparencySeed  = flag.Uint64("transparency.seed", 0, "seed of the transparency property's generator (0: random)")
)

// tRequest is one request of a case.
type tRequest struct {
	Method  string `json:"method,omitempty"` // "" GET
	Trigger bool   `json:"trigger,omitempty"`
	Range   bool   `json:"range,omitempty"`
	INM     string `json:"inm,omitempty"` // If-None-Match
	IMS     bool   `json:"ims,omitempty"` // If-Modified-Since, a day after tLastModified
	CC      string `json:"cc,omitempty"`  // the request's Cache-Control
	// Expire moves the Redis clock past the response's fresh window
	// before this request, which goes to a new node.
	Expire bool `json:"expire,omitempty"`
	// reval: the request a refresh sends, asking with the stored
	// response's validators (never generated; the test's oracle asks it).
	reval bool
}

// TCase is one case of the transparency property.
type TCase struct {
	Behaviour tBehaviour `json:"behaviour"`
	Requests  []tRequest `json:"requests"`
	MaxBody   int        `json:"max_body,omitempty"`
}

const (
	tETag         = `"t1"`
	tLastModified = "Mon, 01 Jan 2029 00:00:00 GMT"
	tMaxBody      = 4096
	// tMaxValueBytes is the Group's MaxValueBytes, the largest MaxBody.
	tMaxValueBytes = 8 << 20
)

// Transparency runs the property on a: a fixed number of generated cases
// (-transparency.cases), from a seed printed on failure
// (-transparency.seed to replay it).
func Transparency(t *testing.T, a Adapter) {
	seed := *transparencySeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newTHarness(t, a)
	for i := range *transparencyCases {
		tc := genCase(rng)
		if !h.check(t, tc) {
			b, _ := json.Marshal(tc)
			t.Fatalf("case %d of seed %d (-transparency.seed=%d) fails; as a seed:\n%s", i, seed, seed, b)
		}
	}
}

// TransparencyCase runs one case: data is a JSON TCase, or any bytes,
// which choose a generated case (for go test -fuzz).
func TransparencyCase(t *testing.T, a Adapter, data []byte) {
	var tc TCase
	if err := json.Unmarshal(data, &tc); err != nil || len(tc.Requests) == 0 {
		tc = genCase(rand.New(&byteSource{b: data}))
	}
	tc.sanitize()
	h := newTHarness(t, a)
	if !h.check(t, tc) {
		b, _ := json.Marshal(tc)
		t.Fatalf("case fails:\n%s", b)
	}
}

// tHarness serves the cases of one test.
type tHarness struct {
	a        Adapter
	straight *httptest.Server
	client   *http.Client
}

// tCaseHeader carries the case to the straight server's handler.
const tCaseHeader = "X-Test-Case"

func newTHarness(t *testing.T, a Adapter) *tHarness {
	h := &tHarness{a: a}
	var origin http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b tBehaviour
		_ = json.Unmarshal([]byte(r.Header.Get(tCaseHeader)), &b)
		b.serve(w, r)
	})
	if a.Plain != nil {
		origin = a.Plain(origin)
	}
	h.straight = quietServer(t, origin)
	h.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return h
}

// quietServer starts h on loopback with net/http's panic logs discarded.
func quietServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// do sends r to base with the case's behaviour, and reads the answer.
func (h *tHarness) do(base string, b tBehaviour, path string, r tRequest) tAnswer {
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	req, _ := http.NewRequest(method, base+path, nil)
	req.Host = "shop.example"
	cb, _ := json.Marshal(b)
	req.Header.Set(tCaseHeader, string(cb))
	if r.Trigger {
		req.Header.Set("X-Trigger", "1")
	}
	if r.Range {
		req.Header.Set("Range", "bytes=0-3")
	}
	if r.INM != "" {
		req.Header.Set("If-None-Match", r.INM)
	}
	if r.IMS {
		req.Header.Set("If-Modified-Since", "Tue, 02 Jan 2029 00:00:00 GMT")
	}
	if r.reval {
		req.Header.Set("If-None-Match", tETag)
		req.Header.Set("If-Modified-Since", tLastModified)
	}
	if r.CC != "" {
		req.Header.Set("Cache-Control", r.CC)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return tAnswer{err: true}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return tAnswer{err: true}
	}
	if hop := b.of(r).connection(); hop != "" {
		resp.Header.Set(tConnectionHeader, hop)
	}
	return tAnswer{status: resp.StatusCode, header: resp.Header, body: string(body), cache: resp.Header.Get("Cache-Status")}
}

// check runs tc through a's middleware and straight, and reports whether
// the property held, logging why not.
func (h *tHarness) check(t *testing.T, tc TCase) bool {
	t.Helper()
	mr, rdb := redistest.Mini(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	ns := redistest.Key(t) + ":"
	var g *guard.Group
	var srv *httptest.Server
	var calls atomic.Int64 // handler calls through the middleware
	node := func() {
		if g != nil {
			_ = g.Close() // waits for a refresh
			srv.Close()
		}
		g = NewGroup(t, rdb, guard.Options{Namespace: ns, FreshFor: 10 * time.Second, StaleFor: 10 * time.Second,
			Jitter: guard.Disabled, WaitTimeout: 2 * time.Second, MaxValueBytes: tMaxValueBytes})
		srv = quietServer(t, h.a.New(g, Config{MaxBodyBytes: tc.MaxBody}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			var b tBehaviour
			_ = json.Unmarshal([]byte(r.Header.Get(tCaseHeader)), &b)
			b.serve(w, r)
		})))
	}
	node()
	defer func() { _ = g.Close(); srv.Close() }()
	// What an unconditional GET gets straight, with and without the
	// trigger: what the cache may serve, when shareable.
	// And what a refresh gets when it asks with the stored validators: a
	// full response to that is stored as any other.
	full := map[bool]tAnswer{}
	reval := map[bool]tAnswer{}
	for _, trig := range []bool{false, true} {
		full[trig] = h.do(h.straight.URL, tc.Behaviour, "/p", tRequest{Trigger: trig})
		reval[trig] = h.do(h.straight.URL, tc.Behaviour, "/p", tRequest{Trigger: trig, reval: true})
	}
	ok := true
	allowed := int64(0) // handler calls the requests so far may cost
	for i, r := range tc.Requests {
		if r.Expire {
			now = now.Add(15 * time.Second)
			mr.SetTime(now)
			// And the keys' TTLs, as a real Redis's clock would (a lease
			// or a back-off from before must not outlive its time).
			mr.FastForward(15 * time.Second)
			node()
			allowed++ // a background refresh
		}
		// One call per request, two where a 304 selects nothing and is
		// asked again unconditionally (RFC 9111 §4.3.4).
		allowed += 1 + int64(tc.Behaviour.refetches())
		want := h.do(h.straight.URL, tc.Behaviour, "/p", r)
		got := h.do(srv.URL, tc.Behaviour, "/p", r)
		if n := calls.Load(); n > allowed {
			t.Errorf("request %d %+v: %d handler calls through the middleware so far, at most %d expected", i+1, r, n, allowed)
			ok = false
		}
		if !h.acceptable(tc, r, got, want, full, reval) {
			t.Errorf("request %d %+v through the middleware got %v; straight %v", i+1, r, got, want)
			ok = false
		}
	}
	return ok
}
