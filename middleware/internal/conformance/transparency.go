package conformance

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
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

// tBehaviour is what a generated handler does: Base, or Trigger for a
// request carrying the X-Trigger header (an input the key does not hold).
type tBehaviour struct {
	Base, Trigger tResponse
}

// tResponse is one response a generated handler writes.
type tResponse struct {
	Status  int         `json:"status"`
	Interim bool        `json:"interim,omitempty"` // a 103 Early Hints first
	Header  [][2]string `json:"header,omitempty"`  // added in order (w.Header().Add)
	// Pieces is the body, written in pieces; "~N" stands for N bytes of x.
	Pieces []string `json:"pieces,omitempty"`
	Flush  bool     `json:"flush,omitempty"` // Flush after each piece
	// Length is the Content-Length the handler declares: "" none,
	// "right", "short" (more than it writes), "long" (less than it writes).
	Length string `json:"length,omitempty"`
	// Twice: the Content-Length on two identical field lines.
	Twice bool `json:"twice,omitempty"`
	// End is how the handler ends: "" it returns, "panic", "abort"
	// (panic(http.ErrAbortHandler)), "hijack" (it takes the connection
	// and writes a raw response itself).
	End string `json:"end,omitempty"`
	// NotModified: the handler answers a matching If-None-Match with a
	// 304 carrying this entity tag ("" the response's own).
	Conditional bool   `json:"conditional,omitempty"`
	NotModified string `json:"not_modified,omitempty"`
}

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

// byteSource is a rand.Source that reads its numbers from fuzz input.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) Uint64() uint64 {
	var v uint64
	for range 8 {
		var c byte
		if s.i < len(s.b) {
			c = s.b[s.i]
		}
		s.i++
		v = v<<8 | uint64(c)
	}
	return v
}

// sanitize bounds a case read from outside (fuzz input, a seed file).
func (tc *TCase) sanitize() {
	if len(tc.Requests) > 6 {
		tc.Requests = tc.Requests[:6]
	}
	for _, r := range []*tResponse{&tc.Behaviour.Base, &tc.Behaviour.Trigger} {
		if r.Status < 100 || r.Status > 599 || (r.Status < 200 && r.Status != 0) {
			r.Status = 200
		}
		if len(r.Header) > 2000 {
			r.Header = r.Header[:2000]
		}
	}
	if tc.MaxBody <= 0 {
		tc.MaxBody = tMaxBody
	}
}

// genCase generates a case.
func genCase(rng *rand.Rand) TCase {
	tc := TCase{Behaviour: tBehaviour{Base: genResponse(rng)}, MaxBody: tMaxBody}
	tc.Behaviour.Trigger = tc.Behaviour.Base
	if rng.IntN(2) == 0 {
		tc.Behaviour.Trigger = genResponse(rng)
	}
	n := 2 + rng.IntN(4)
	for range n {
		r := tRequest{Trigger: rng.IntN(3) == 0, Expire: rng.IntN(5) == 0}
		switch rng.IntN(12) {
		case 0:
			r.Method = http.MethodHead
		case 1:
			r.Range = true
		case 2:
			r.INM = pick(rng, tETag, `W/"t1"`, `"other"`, "*")
		case 3:
			r.IMS = true
		case 4:
			r.CC = pick(rng, "no-cache", "max-age=0", "no-store", "max-stale")
		}
		tc.Requests = append(tc.Requests, r)
	}
	return tc
}

func pick[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

var tStatuses = []int{200, 200, 200, 200, 201, 203, 204, 206, 301, 302, 304, 400, 404, 410, 500, 502, 503}

// genResponse generates a handler response: mostly plain, shareable ones,
// with every kind of trouble mixed in.
func genResponse(rng *rand.Rand) tResponse {
	r := tResponse{Status: pick(rng, tStatuses...), Interim: rng.IntN(10) == 0}
	for range rng.IntN(4) {
		r.Header = append(r.Header, genField(rng))
	}
	if rng.IntN(3) == 0 {
		r.Header = append(r.Header, [2]string{"Etag", tETag}, [2]string{"Last-Modified", tLastModified})
		r.Conditional = rng.IntN(2) == 0
		if r.Conditional && rng.IntN(3) == 0 {
			r.NotModified = pick(rng, `"t2"`, `W/"t1"`)
		}
	}
	if rng.IntN(15) == 0 {
		// Hundreds of values of one field.
		for range 900 + rng.IntN(300) {
			r.Header = append(r.Header, [2]string{"X-Many", "v"})
		}
	}
	for range rng.IntN(4) {
		r.Pieces = append(r.Pieces, genBody(rng))
	}
	r.Flush = rng.IntN(6) == 0
	r.Length = pick(rng, "", "", "", "right", "short", "long")
	r.Twice = r.Length != "" && rng.IntN(4) == 0
	switch rng.IntN(14) {
	case 0:
		r.End = "panic"
	case 1:
		r.End = "abort"
	case 2:
		r.End = "hijack"
	}
	return r
}

// genField generates a response header field: valid, or one of the ways a
// handler can write what no decoder reads back.
func genField(rng *rand.Rand) [2]string {
	switch rng.IntN(16) {
	case 0:
		return [2]string{"Set-Cookie", "s=1"}
	case 1:
		return [2]string{"Cache-Control", pick(rng, "private", "no-store", "no-cache", "public, max-age=60", "max-age=0", "s-maxage=5")}
	case 2:
		return [2]string{"Vary", pick(rng, "*", "X-Trigger", "Accept-Language")}
	case 3:
		return [2]string{"X-Value", pick(rng, "a\r\nInjected: 1", "a\nb", "a\rb", "nul\x00byte")}
	case 4:
		return [2]string{pick(rng, "Bad Name", "X:Colon", "X(Paren)", "\x7fDel"), "v"}
	case 5:
		return [2]string{"X-Obs", "caf\u00e9 \u00ff"} // obs-text, as UTF-8 bytes (JSON seeds keep them)
	case 6:
		return [2]string{"Content-Type", pick(rng, "text/event-stream", "application/json", "text/html; charset=utf-8")}
	case 7:
		return [2]string{"Connection", "X-Hop"}
	case 8:
		return [2]string{"X-Hop", "h"}
	case 9:
		return [2]string{"x-lower-case", "lc"}
	case 10:
		return [2]string{"X-Spaces", "  padded  "}
	case 11:
		return [2]string{"X-Empty", ""}
	}
	return [2]string{"X-Field-" + strconv.Itoa(rng.IntN(4)), strconv.Itoa(rng.IntN(1000))}
}

func genBody(rng *rand.Rand) string {
	switch rng.IntN(8) {
	case 0:
		return ""
	case 1:
		return "<html><body>hi</body></html>"
	case 2:
		return "~" + strconv.Itoa(1000+rng.IntN(4000)) // that many x: may outgrow MaxBody
	case 3:
		return "\x00\x01\x02binary"
	case 4:
		return "%PDF-1.4"
	}
	return fmt.Sprintf("piece-%d ", rng.IntN(100))
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

// serve answers r as b says.
func (b tBehaviour) serve(w http.ResponseWriter, r *http.Request) {
	resp := b.Base
	if r.Header.Get("X-Trigger") != "" {
		resp = b.Trigger
	}
	resp.serve(w, r)
}

func (resp tResponse) serve(w http.ResponseWriter, r *http.Request) {
	if resp.End == "hijack" {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nX-Raw: 1\r\nConnection: close\r\n\r\nhijacked")
		_ = brw.Flush()
		return
	}
	h := w.Header()
	if resp.Interim {
		h.Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
	}
	for _, f := range resp.Header {
		h[f[0]] = append(h[f[0]], f[1])
	}
	if resp.Conditional && slices.Contains(r.Header.Values("If-None-Match"), tETag) {
		if resp.NotModified != "" {
			h.Set("Etag", resp.NotModified)
		}
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := resp.body()
	switch resp.Length {
	case "right":
		h.Set("Content-Length", strconv.Itoa(len(body)))
	case "short":
		h.Set("Content-Length", strconv.Itoa(len(body)+10))
	case "long":
		if len(body) > 0 {
			h.Set("Content-Length", strconv.Itoa(len(body)-1))
		}
	}
	if v := h["Content-Length"]; resp.Twice && len(v) == 1 {
		h["Content-Length"] = []string{v[0], v[0]}
	}
	w.WriteHeader(resp.Status)
	for _, p := range resp.Pieces {
		_, _ = io.WriteString(w, piece(p))
		if resp.Flush {
			_ = http.NewResponseController(w).Flush()
		}
	}
	switch resp.End {
	case "panic":
		panic("generated panic")
	case "abort":
		panic(http.ErrAbortHandler)
	}
}

// tConnectionHeader carries, in an answer, the Connection field the
// handler set (net/http sends its own instead).
const tConnectionHeader = "X-Test-Handler-Connection"

// connection returns the handler's Connection field, joined.
func (resp tResponse) connection() string {
	var vs []string
	for _, f := range resp.Header {
		if http.CanonicalHeaderKey(f[0]) == "Connection" {
			vs = append(vs, f[1])
		}
	}
	return strings.Join(vs, ",")
}

// refetches is 1 when a revalidation of b may be answered by a 304 that
// selects nothing (another entity tag, or none), so the handler is asked
// again, else 0.
func (b tBehaviour) refetches() int {
	for _, resp := range []tResponse{b.Base, b.Trigger} {
		if resp.Status == http.StatusNotModified ||
			(resp.Conditional && resp.NotModified != "" && strings.TrimPrefix(resp.NotModified, "W/") != tETag) {
			return 1
		}
	}
	return 0
}

// of returns the response b gives r.
func (b tBehaviour) of(r tRequest) tResponse {
	if r.Trigger {
		return b.Trigger
	}
	return b.Base
}

// abortedWhole reports whether got is all of resp, a response whose
// handler panicked after writing the whole body it declared.
func (resp tResponse) abortedWhole(got tAnswer) bool {
	return resp.panics() && resp.Length == "right" && got.status == resp.Status && got.body == resp.body()
}

func (resp tResponse) panics() bool { return resp.End == "panic" || resp.End == "abort" }

// piece returns the bytes a piece stands for.
func piece(p string) string {
	if n, err := strconv.Atoi(strings.TrimPrefix(p, "~")); err == nil && strings.HasPrefix(p, "~") && n <= 1<<20 {
		return strings.Repeat("x", n)
	}
	return p
}

func (resp tResponse) body() string {
	var b strings.Builder
	for _, p := range resp.Pieces {
		b.WriteString(piece(p))
	}
	return b.String()
}

// tAnswer is what a client saw of one response.
type tAnswer struct {
	err    bool // the exchange or the body broke off
	status int
	header http.Header
	body   string
	cache  string // Cache-Status
}

// ignored are the fields the comparison leaves out: those a cache sets
// (Age, Cache-Status), the date of sending, the framing, and hop-by-hop
// fields, which a cache does not forward (RFC 9110 §7.6.1).
var ignored = map[string]bool{
	"Age": true, "Cache-Status": true, "Date": true, "Content-Length": true,
	"Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Upgrade": true,
}

func (a tAnswer) String() string {
	if a.err {
		return "broken response"
	}
	body := a.body
	if len(body) > 40 {
		body = body[:40] + "..."
	}
	return fmt.Sprintf("%d %d bytes %q %v", a.status, len(a.body), body, a.header)
}

// same reports whether a and b are the same response, as far as the
// property compares them.
func same(a, b tAnswer) bool {
	if a.err || b.err {
		return a.err == b.err
	}
	return a.status == b.status && a.body == b.body && sameHeader(a.header, b.header)
}

func sameHeader(a, b http.Header) bool {
	// The fields a Connection field names are hop-by-hop: a cache drops
	// them (RFC 9110 §7.6.1), net/http replaces the handler's Connection
	// with its own. Named on either side, they are not compared.
	hop := map[string]bool{}
	for _, h := range []http.Header{a, b} {
		for _, v := range append(h["Connection"], h[tConnectionHeader]...) {
			for f := range strings.SplitSeq(v, ",") {
				hop[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
			}
		}
	}
	keep := func(h http.Header) map[string][]string {
		m := map[string][]string{}
		for k, v := range h {
			if !ignored[k] && !hop[k] && k != tConnectionHeader {
				m[k] = v
			}
		}
		return m
	}
	ka, kb := keep(a), keep(b)
	if len(ka) != len(kb) {
		return false
	}
	for k, v := range ka {
		if !slices.Equal(v, kb[k]) {
			return false
		}
	}
	return true
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

// shareable is the test's own judgement of a response of the default
// Config: what the package docs say is shared (and RFC 9111 allows).
// status is the status the client saw straight: a framework may send
// another than the handler asked for (echo sends 200 after a 1xx).
func (resp tResponse) shareable(maxBody, status int) bool {
	if resp.End != "" || !slices.Contains([]int{200, 203, 204, 300, 301, 308, 404, 405, 410, 414}, status) {
		return false
	}
	// 204 and 304 have no body: net/http drops what the handler writes and
	// the Content-Length it declares.
	if body := resp.body(); status != 204 && status != 304 &&
		(resp.Length == "short" || (resp.Length == "long" && len(body) > 0) || len(body) > maxBody) {
		return false
	}
	counts := map[string]int{}
	for _, f := range resp.Header {
		name, v := http.CanonicalHeaderKey(f[0]), strings.ToLower(f[1])
		counts[name]++
		switch {
		case !validToken(f[0]) || strings.ContainsAny(f[1], "\r\n\x00"):
			return false // not readable back exactly
		case name == "Set-Cookie":
			return false
		case name == "Cache-Control" && (strings.Contains(v, "private") || strings.Contains(v, "no-store") || strings.Contains(v, "no-cache")):
			return false
		case name == "Vary" && strings.Contains(v, "*"):
			return false
		case name == "Content-Type" && strings.Contains(v, "text/event-stream"):
			return false
		}
	}
	for _, n := range counts {
		if n > 1024 {
			return false
		}
	}
	return true
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// fromCache reports an answer served from the cache (or by another
// request's handler call, or stored by this one's).
func fromCache(cs string) bool {
	return cs == "stampede; hit" || cs == "stampede; fwd=stale" ||
		cs == "stampede; fwd=miss; collapsed" || cs == "stampede; fwd=miss; stored" ||
		cs == "stampede; fwd=miss; detail=pass"
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
			Jitter: guard.Disabled, WaitTimeout: 2 * time.Second})
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
		if same(got, want) {
			continue
		}
		if conditional(r) && same(got, full[r.Trigger]) {
			// The cache asks the handler unconditionally (a client's
			// preconditions are answered from the stored response): a
			// full response is a right answer to a conditional request.
			continue
		}
		if !got.err && fromCache(got.cache) && h.servable(tc, r, got, full, reval) {
			continue
		}
		if resp := tc.Behaviour.of(r); resp.panics() && (got.err || (!fromCache(got.cache) && resp.abortedWhole(got))) {
			// The handler panicked: its response is broken, though
			// net/http, which drops what it still buffers, sometimes
			// delivers all of it anyway (a body it had already passed on
			// whole). Either is right; a truncation passed off as whole
			// is not.
			continue
		}
		t.Errorf("request %d %+v through the middleware got %v; straight %v", i+1, r, got, want)
		ok = false
	}
	return ok
}

// servable reports whether got, served from the cache to r, is a
// shareable response of the behaviour with r's preconditions applied.
func (h *tHarness) servable(tc TCase, r tRequest, got tAnswer, full, reval map[bool]tAnswer) bool {
	for _, trig := range []bool{false, true} {
		resp := tc.Behaviour.of(tRequest{Trigger: trig})
		for _, stored := range []tAnswer{full[trig], reval[trig]} {
			if stored.err || stored.status == http.StatusNotModified || !resp.shareable(tc.MaxBody, stored.status) {
				continue
			}
			for _, f := range revalidated(stored, reval, tc.Behaviour) {
				if matches(r, got, f) {
					return true
				}
			}
		}
	}
	return false
}

// revalidated returns f, and f as each revalidation may update it: a
// refresh asks the handler with f's validators, for whichever request
// started it, and a 304 (reval holds the handler's answers to that
// request) selects f when its entity tag, if any, weakly matches f's (RFC
// 9111 §4.3.4); its fields then replace f's, but those a cache never
// stores. The cache reads the 304 as the handler wrote it, so a
// Content-Type the handler set on it, which net/http drops on the wire
// (reval does not show it), updates f too.
func revalidated(f tAnswer, reval map[bool]tAnswer, b tBehaviour) []tAnswer {
	out := []tAnswer{f}
	for trig, nm := range reval {
		if nm.err || nm.status != http.StatusNotModified {
			continue
		}
		if tag := nm.header.Get("Etag"); tag != "" && strings.TrimPrefix(tag, "W/") != strings.TrimPrefix(f.header.Get("Etag"), "W/") {
			continue // selects nothing: asked again, unconditionally
		}
		u := f
		u.header = f.header.Clone()
		for k, v := range nm.header {
			if !ignored[k] && k != "Set-Cookie" && k != tConnectionHeader {
				u.header[k] = v
			}
		}
		var ct []string
		for _, fl := range b.of(tRequest{Trigger: trig}).Header {
			if fl[0] == "Content-Type" {
				ct = append(ct, fl[1])
			}
		}
		if ct != nil {
			u.header["Content-Type"] = ct
		}
		out = append(out, u)
	}
	return out
}

// matches reports whether got is f served to r from the cache.
func matches(r tRequest, got, f tAnswer) bool {
	if r.Range && f.status == http.StatusOK {
		// bytes=0-3 from a stored 200 (RFC 9110 §14): its first four
		// bytes as a 206, or the whole response; net/http's ServeContent
		// adds Accept-Ranges.
		switch {
		case got.status == http.StatusPartialContent:
			return len(f.body) > 0 && got.body == f.body[:min(4, len(f.body))] && got.header.Get("Content-Range") != ""
		case got.status == http.StatusRequestedRangeNotSatisfiable:
			return f.body == ""
		case got.status == http.StatusOK:
			return got.body == f.body
		}
	}
	switch want := precondition(r, f); {
	case r.Method == http.MethodHead:
		return got.status == f.status && got.body == "" && sameHeader(got.header, f.header)
	case same(got, f):
		// The full response: right for any request, a conditional one
		// included.
		return true
	case want != 0:
		return got.status == want && got.body == ""
	}
	return false
}

func conditional(r tRequest) bool { return r.INM != "" || r.IMS }

// precondition is the status r's preconditions make of the stored full
// answer f (RFC 9110 §13.2.2), or 0.
func precondition(r tRequest, f tAnswer) int {
	if f.status < 200 || f.status > 299 {
		return 0
	}
	etag := f.header.Get("Etag")
	switch {
	case r.INM == "*":
		return http.StatusNotModified
	case r.INM != "":
		if etag != "" && strings.TrimPrefix(r.INM, "W/") == strings.TrimPrefix(etag, "W/") {
			return http.StatusNotModified
		}
		return 0
	case r.IMS:
		lm := f.header.Get("Last-Modified")
		if lm == "" {
			lm = f.header.Get("Date")
		}
		if t, err := http.ParseTime(lm); err == nil && !t.After(time.Date(2029, 1, 2, 0, 0, 0, 0, time.UTC)) {
			return http.StatusNotModified
		}
	}
	return 0
}
