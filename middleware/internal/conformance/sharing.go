package conformance

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// sharing holds the sharing rules: each row sends two requests from two
// clients, one after the other, and checks how many handler calls they
// cost (1: the second was served the first's response; 2: it was not) and
// what the second one got.
func sharing(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	rows := slices.Concat(shareKeyRows(), shareRequestRows(), shareResponseRows(), shareBehaviourRows())
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			row.run(t, a, rdb)
		})
	}
}

// shareRow is one row of the sharing rules: two requests, one after the
// other, and what they must cost and get.
type shareRow struct {
	name       string
	cfg        Config
	serve      func(http.ResponseWriter, *http.Request, int64)
	req1, req2 *http.Request
	wantCalls  int64
	check      func(t *testing.T, first, second *httptest.ResponseRecorder)
}

// run sends the row's two requests and checks their cost and answers.
func (row shareRow) run(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	g := NewGroup(t, rdb, guard.Options{FreshFor: time.Hour})
	o := &origin{serve: row.serve}
	h := a.New(g, row.cfg, o)
	first := serve(h, row.req1)
	second := serve(h, row.req2)
	if got := o.calls.Load(); got != row.wantCalls {
		t.Errorf("handler calls %d, want %d", got, row.wantCalls)
	}
	for _, rec := range []*httptest.ResponseRecorder{first, second} {
		if cs := rec.Header().Get("Cache-Status"); strings.Contains(cs, "h2:") || strings.Contains(cs, "hu:") {
			t.Errorf("Cache-Status %q shows the key", cs)
		}
	}
	if row.wantCalls == 2 && second.Header().Get("Cache-Status") == "stampede; hit" {
		t.Errorf("second response is a hit")
	}
	if row.check != nil {
		row.check(t, first, second)
	}
}

// shareKeyRows: keys (rule 4).
func shareKeyRows() []shareRow {
	return []shareRow{
		{name: "key/query order is canonical", req1: get("/a?x=1&y=2"), req2: get("/a?y=2&x=1"), wantCalls: 1},
		{name: "key/query escaping is canonical", req1: get("/a?q=a%20b"), req2: get("/a?q=a+b"), wantCalls: 1},
		{name: "key/query value differs", req1: get("/a?page=1"), req2: get("/a?page=2"), wantCalls: 2},
		{name: "key/repeated values keep order", req1: get("/a?t=1&t=2"), req2: get("/a?t=2&t=1"), wantCalls: 2},
		{name: "key/host differs", req1: with(get("/a"), func(r *http.Request) { r.Host = "a.example" }), req2: with(get("/a"), func(r *http.Request) { r.Host = "b.example" }), wantCalls: 2},
		// Routers match hosts case-sensitively (ServeMux, echo's Host):
		// folding case would let one host's answer reach another.
		{name: "key/host case differs", req1: with(get("/a"), func(r *http.Request) { r.Host = "A.example" }), req2: with(get("/a"), func(r *http.Request) { r.Host = "a.EXAMPLE" }), wantCalls: 2},
		{name: "key/scheme differs", req1: get("/a"), req2: with(get("/a"), func(r *http.Request) { r.TLS = &tls.ConnectionState{} }), wantCalls: 2},
		{name: "key/path differs", req1: get("/a"), req2: get("/b"), wantCalls: 2},
		{name: "key/escaped path differs", req1: get("/a%2Fb"), req2: get("/a/b"), wantCalls: 2},
		{name: "key/unlisted header ignored", req1: with(get("/a"), header("Accept-Language", "fr")), req2: with(get("/a"), header("Accept-Language", "de")), wantCalls: 1},
		{name: "key/listed header differs", cfg: Config{KeyHeaders: []string{"accept-language"}}, req1: with(get("/a"), header("Accept-Language", "fr")), req2: with(get("/a"), header("Accept-Language", "de")), wantCalls: 2},
	}
}

// shareRequestRows: requests never shared (rule 5).
func shareRequestRows() []shareRow {
	return []shareRow{
		{name: "request/Authorization bypasses", req1: with(get("/a"), header("Authorization", "Bearer x")), req2: with(get("/a"), header("Authorization", "Bearer y")), wantCalls: 2,
			check: wantCacheStatus("stampede; fwd=bypass")},
		{name: "request/Authorization response not served to others", req1: with(get("/a"), header("Authorization", "Bearer x")), req2: get("/a"), wantCalls: 2},
		{name: "request/Cookie bypasses", req1: with(get("/a"), header("Cookie", "s=1")), req2: get("/a"), wantCalls: 2},
		{name: "request/Range bypasses", req1: with(get("/a"), header("Range", "bytes=0-1")), req2: get("/a"), wantCalls: 2},
		{name: "request/Upgrade bypasses", req1: with(get("/a"), func(r *http.Request) { r.Header.Set("Connection", "Upgrade"); r.Header.Set("Upgrade", "websocket") }), req2: get("/a"), wantCalls: 2},
		{name: "request/Upgrade header alone bypasses", req1: with(get("/a"), header("Upgrade", "websocket")), req2: get("/a"), wantCalls: 2},
		{name: "request/Connection upgrade alone bypasses", req1: with(get("/a"), header("Connection", "keep-alive, Upgrade")), req2: get("/a"), wantCalls: 2},
		// A proxy drops the fields Connection names before it asks the
		// origin (RFC 9110 §7.6.1); the key would still hold them.
		{name: "request/Connection naming a field bypasses", req1: with(with(get("/a"), header("Accept", "application/json")), header("Connection", "keep-alive, Accept")), req2: with(get("/a"), header("Accept", "application/json")), wantCalls: 2},
		{name: "request/Connection close or keep-alive is shared", req1: with(get("/a"), header("Connection", "close")), req2: with(get("/a"), header("Connection", "Keep-Alive")), wantCalls: 1},
		{name: "request/SSE bypasses", req1: with(get("/a"), header("Accept", "text/event-stream")), req2: get("/a"), wantCalls: 2},
		{name: "request/POST bypasses", req1: httptest.NewRequest(http.MethodPost, "/a", nil), req2: httptest.NewRequest(http.MethodPost, "/a", nil), wantCalls: 2},
		{name: "request/client no-cache ignored by default", req1: get("/a"), req2: with(get("/a"), header("Cache-Control", "no-cache")), wantCalls: 1},
		{name: "request/client Pragma no-cache ignored by default", req1: get("/a"), req2: with(get("/a"), header("Pragma", "no-cache")), wantCalls: 1},
		{name: "request/client Pragma no-cache honoured when configured", cfg: Config{HonorClientNoCache: true}, req1: get("/a"), req2: with(get("/a"), header("Pragma", "no-cache")), wantCalls: 2},
		{name: "request/client no-cache honoured when configured", cfg: Config{HonorClientNoCache: true}, req1: get("/a"), req2: with(get("/a"), header("Cache-Control", "no-cache")), wantCalls: 2},
	}
}

// shareResponseRows: responses never shared (rule 5).
func shareResponseRows() []shareRow {
	big := strings.Repeat("x", 2048)
	return []shareRow{
		{name: "response/Set-Cookie", serve: respond(200, "b", "Set-Cookie", "s=secret"), req1: get("/a"), req2: get("/a"), wantCalls: 2,
			check: func(t *testing.T, first, second *httptest.ResponseRecorder) {
				if first.Header().Get("Set-Cookie") != "s=secret" {
					t.Errorf("the client whose request ran the handler lost its cookie: %v", first.Header())
				}
			}},
		{name: "response/Set-Cookie under a non-canonical name", serve: func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header()["set-cookie"] = []string{"s=secret"}
			_, _ = w.Write([]byte("b"))
		}, req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/private", serve: respond(200, "b", "Cache-Control", "private"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/private with fields", serve: respond(200, "b", "Cache-Control", `max-age=60, private="X-Y"`), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/no-store", serve: respond(200, "b", "Cache-Control", "no-store"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/no-store in capitals", serve: respond(200, "b", "Cache-Control", "public, NO-STORE"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/no-cache", serve: respond(200, "b", "Cache-Control", "no-cache"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/Vary star", serve: respond(200, "b", "Vary", "*"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/Vary star even if star is a key header", cfg: Config{KeyHeaders: []string{"*"}}, serve: respond(200, "b", "Vary", "*"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		// A Vary on a header the key does not hold selects a variant
		// (RFC 9111 §4.1): shared only with requests that send the same.
		{name: "response/Vary on unkeyed header: same value shared", serve: respond(200, "b", "Vary", "Accept-Encoding"), req1: with(get("/a"), header("Accept-Encoding", "gzip, br")), req2: with(get("/a"), header("Accept-Encoding", "gzip, br")), wantCalls: 1},
		{name: "response/Vary on unkeyed header: another spelling not shared", serve: respond(200, "b", "Vary", "Accept-Encoding"), req1: with(get("/a"), header("Accept-Encoding", "gzip, br")), req2: with(get("/a"), header("Accept-Encoding", "GZIP,br")), wantCalls: 2},
		{name: "response/Vary on unkeyed header: other value not shared", serve: respond(200, "b", "Vary", "Accept-Encoding"), req1: with(get("/a"), header("Accept-Encoding", "gzip")), req2: with(get("/a"), header("Accept-Encoding", "br")), wantCalls: 2},
		{name: "response/Vary on unkeyed header: absent is not empty", serve: respond(200, "b", "Vary", "X-Mode"), req1: get("/a"), req2: with(get("/a"), header("X-Mode", "")), wantCalls: 2},
		{name: "response/Vary on keyed header shared", cfg: Config{KeyHeaders: []string{"Accept-Encoding"}}, serve: respond(200, "b", "Vary", "accept-encoding"), req1: get("/a"), req2: get("/a"), wantCalls: 1},
		{name: "response/500", serve: respond(500, "oops"), req1: get("/a"), req2: get("/a"), wantCalls: 2, check: wantStatus(500)},
		{name: "response/503", serve: respond(503, "busy"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/5xx never shared (Statuses cannot list it: Misuse)", cfg: Config{}, serve: respond(500, "oops"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/206", serve: respond(206, "pa", "Content-Range", "bytes 0-1/4"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/206 never shared (Statuses cannot list it: Misuse)", cfg: Config{}, serve: respond(206, "pa", "Content-Range", "bytes 0-1/4"), req1: get("/a"), req2: get("/a"), wantCalls: 2, check: wantStatus(206)},
		{name: "response/302 not in default statuses", serve: respond(302, "", "Location", "/b"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/configured status shared", cfg: Config{Statuses: []int{200, 302}}, serve: respond(302, "", "Location", "/b"), req1: get("/a"), req2: get("/a"), wantCalls: 1, check: wantStatus(302)},
		{name: "response/404 shared", serve: respond(404, "none"), req1: get("/a"), req2: get("/a"), wantCalls: 1, check: wantStatus(404)},
		{name: "response/event stream", serve: respond(200, "data: x\n\n", "Content-Type", "text/event-stream"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/body over MaxBodyBytes", cfg: Config{MaxBodyBytes: 1024}, serve: respond(200, big), req1: get("/a"), req2: get("/a"), wantCalls: 2,
			check: func(t *testing.T, first, second *httptest.ResponseRecorder) {
				for i, rec := range []*httptest.ResponseRecorder{first, second} {
					if rec.Body.String() != big {
						t.Errorf("response %d: %d bytes, want the full %d", i+1, rec.Body.Len(), len(big))
					}
				}
			}},
		{name: "response/upstream max-age=0 ignored by default", serve: respond(200, "b", "Cache-Control", "max-age=0"), req1: get("/a"), req2: get("/a"), wantCalls: 1},
		{name: "response/upstream max-age=0 honoured when configured", cfg: Config{UpstreamWindows: true}, serve: respond(200, "b", "Cache-Control", "max-age=0"), req1: get("/a"), req2: get("/a"), wantCalls: 2},
		{name: "response/body at MaxBodyBytes shared", cfg: Config{MaxBodyBytes: len(big)}, serve: respond(200, big), req1: get("/a"), req2: get("/a"), wantCalls: 1},
	}
}

// shareBehaviourRows: behaviour (rule 6).
func shareBehaviourRows() []shareRow {
	return []shareRow{
		{name: "behaviour/Cache-Status miss then hit, Age", req1: get("/a"), req2: get("/a"), wantCalls: 1,
			check: func(t *testing.T, first, second *httptest.ResponseRecorder) {
				if got := first.Header().Get("Cache-Status"); got != "stampede; fwd=miss; stored" {
					t.Errorf("first Cache-Status %q", got)
				}
				if got := second.Header().Get("Cache-Status"); got != "stampede; hit" {
					t.Errorf("second Cache-Status %q", got)
				}
				if second.Header().Get("Age") == "" {
					t.Errorf("no Age on a hit")
				}
				if first.Body.String() != second.Body.String() || first.Body.String() != "call 1 GET /a" {
					t.Errorf("bodies %q, %q", first.Body, second.Body)
				}
			}},
		{name: "behaviour/HEAD served from GET entry", req1: get("/a"), req2: httptest.NewRequest(http.MethodHead, "/a", nil), wantCalls: 1,
			check: func(t *testing.T, first, second *httptest.ResponseRecorder) {
				if second.Body.Len() != 0 {
					t.Errorf("HEAD got a body %q", second.Body)
				}
				if got := second.Header().Get("Content-Length"); got != "13" {
					t.Errorf("HEAD Content-Length %q, want 13", got)
				}
			}},
		// A HEAD with nothing stored is the handler's to answer, as a
		// HEAD (RFC 9110 §9.3.2): it is not turned into a GET to fill
		// the entry, and its answer is not stored.
		{name: "behaviour/HEAD with nothing stored reaches the handler as HEAD", req1: httptest.NewRequest(http.MethodHead, "/a", nil), req2: get("/a"), wantCalls: 2,
			check: func(t *testing.T, first, second *httptest.ResponseRecorder) {
				if got := second.Body.String(); got != "call 2 GET /a" {
					t.Errorf("GET after HEAD got %q", got)
				}
				if got := first.Header().Get("Cache-Status"); got != "stampede; fwd=miss" {
					t.Errorf("HEAD Cache-Status %q", got)
				}
			}},
		{name: "behaviour/stored headers keep content, drop hop-by-hop", serve: respond(200, "b", "X-Kept", "1", "Connection", "X-Hop", "X-Hop", "h", "Keep-Alive", "timeout=5"), req1: get("/a"), req2: get("/a"), wantCalls: 1,
			check: func(t *testing.T, first, second *httptest.ResponseRecorder) {
				h := second.Header()
				if h.Get("X-Kept") != "1" || h.Get("X-Hop") != "" || h.Get("Keep-Alive") != "" || h.Get("Connection") != "" {
					t.Errorf("served header %v", h)
				}
			}},
	}
}

func wantCacheStatus(want string) func(*testing.T, *httptest.ResponseRecorder, *httptest.ResponseRecorder) {
	return func(t *testing.T, first, second *httptest.ResponseRecorder) {
		for i, rec := range []*httptest.ResponseRecorder{first, second} {
			if got := rec.Header().Get("Cache-Status"); got != want {
				t.Errorf("response %d: Cache-Status %q, want %q", i+1, got, want)
			}
		}
	}
}

func wantStatus(want int) func(*testing.T, *httptest.ResponseRecorder, *httptest.ResponseRecorder) {
	return func(t *testing.T, first, second *httptest.ResponseRecorder) {
		for i, rec := range []*httptest.ResponseRecorder{first, second} {
			if rec.Code != want {
				t.Errorf("response %d: status %d, want %d", i+1, rec.Code, want)
			}
		}
	}
}
