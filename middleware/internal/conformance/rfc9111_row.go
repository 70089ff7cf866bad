package conformance

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// reply is one scripted origin response.
type reply struct {
	status int
	header []string // name, value pairs
	body   string
}

// originFunc answers the origin's n-th request (from 1).
type originFunc func(n int, r *http.Request) reply

// always answers every request alike.
func always(status int, body string, kv ...string) originFunc {
	return func(int, *http.Request) reply { return reply{status, kv, body} }
}

// validated answers 304 to a request whose If-None-Match names etag, else
// 200 with body; kv go with both.
func validated(etag, body string, kv ...string) originFunc {
	return func(_ int, r *http.Request) reply {
		kv := append([]string{"ETag", etag}, kv...)
		if r.Header.Get("If-None-Match") == etag {
			return reply{304, kv, ""}
		}
		return reply{200, kv, body}
	}
}

// byCount answers the n-th request with replies[n-1], the last one after.
func byCount(replies ...reply) originFunc {
	return func(n int, _ *http.Request) reply { return replies[min(n, len(replies))-1] }
}

// step is one client request and what it must get.
type step struct {
	method     string   // default GET
	path       string   // default /r
	header     []string // request fields, name, value pairs
	status     int      // default 200
	body       *string  // nil: not checked
	want       []string // response fields, name, value pairs; value "<absent>" or "<present>"
	origin     int      // origin requests so far, after this step; -1 not checked
	eventually bool     // origin may reach the count after the step (a background refresh)
	// until: a background refresh of an earlier step decides this one's
	// answer; the request is repeated (up to 10 s) until its body is body.
	until bool
	check func(t *testing.T, resp *http.Response, seen []*http.Request)
}

func text(s string) *string { return &s }

const (
	absent  = "<absent>"
	present = "<present>"
)

// rfcRow is one row of the table.
type rfcRow struct {
	section, name string
	cfg           *Config // nil: strict
	origin        originFunc
	steps         []step
}

// stamp is an origin for rows whose responses carry a Date of now.
func now() string { return time.Now().UTC().Format(http.TimeFormat) }

func ago(d time.Duration) string { return time.Now().Add(-d).UTC().Format(http.TimeFormat) }

// hit is what a step served from the store carries.
var hit = []string{"Cache-Status", "stampede; hit", "Age", present}

func wantConditional(i int, name, value string) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, _ *http.Response, seen []*http.Request) {
		t.Helper()
		if len(seen) <= i {
			t.Fatalf("the origin saw %d requests", len(seen))
		}
		if got := seen[i].Header.Get(name); got != value {
			t.Errorf("origin request %d: %s %q, want %q", i+1, name, got, value)
		}
	}
}

func wantAgeAtLeast(n int) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, resp *http.Response, _ []*http.Request) {
		t.Helper()
		var age int
		if _, err := fmt.Sscan(resp.Header.Get("Age"), &age); err != nil || age < n {
			t.Errorf("Age %q, want at least %d", resp.Header.Get("Age"), n)
		}
	}
}

func wantAgeBelow(n int) func(*testing.T, *http.Response, []*http.Request) {
	return func(t *testing.T, resp *http.Response, _ []*http.Request) {
		t.Helper()
		var age int
		if _, err := fmt.Sscan(resp.Header.Get("Age"), &age); err != nil || age >= n {
			t.Errorf("Age %q, want below %d", resp.Header.Get("Age"), n)
		}
	}
}

// scripted is an origin server that answers with f and records what it
// received.
type scripted struct {
	mu   sync.Mutex
	seen []*http.Request
	f    originFunc
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, r.Clone(r.Context()))
	n := len(s.seen)
	s.mu.Unlock()
	rep := s.f(n, r)
	for i := 0; i+1 < len(rep.header); i += 2 {
		w.Header().Add(rep.header[i], rep.header[i+1])
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (s *scripted) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// front starts the chain client → adapter → ReverseProxy → origin on
// loopback and returns the front's URL; wrap, when set, wraps the adapter.
func front(t *testing.T, a Adapter, g *guard.Group, cfg Config, origin http.Handler, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	o := httptest.NewServer(origin)
	t.Cleanup(o.Close)
	u, err := url.Parse(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	h := a.New(g, cfg, proxy)
	if wrap != nil {
		h = wrap(h)
	}
	f := httptest.NewServer(h)
	t.Cleanup(f.Close)
	return f.URL
}

// client sends requests as they are: no compression negotiated, no
// redirects followed.
var client = &http.Client{
	Transport:     &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       20 * time.Second,
}

func (row rfcRow) run(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	cfg := strict
	if row.cfg != nil {
		cfg = *row.cfg
	}
	g := NewGroup(t, rdb, guard.Options{})
	origin := &scripted{f: row.origin}
	base := front(t, a, g, cfg, origin, nil)
	for i, st := range row.steps {
		method := cmpOr(st.method, http.MethodGet)
		req, err := http.NewRequest(method, base+cmpOr(st.path, "/r"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "cache.example"
		for j := 0; j+1 < len(st.header); j += 2 {
			req.Header.Add(st.header[j], st.header[j+1])
		}
		resp, body := sendStep(t, req, i+1)
		for deadline := time.Now().Add(10 * time.Second); st.until && string(body) != *st.body && time.Now().Before(deadline); {
			resp, body = sendStep(t, req, i+1)
		}
		if want := cmpOr(st.status, http.StatusOK); resp.StatusCode != want {
			t.Errorf("step %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
		if st.body != nil && string(body) != *st.body {
			t.Errorf("step %d: body %q, want %q", i+1, body, *st.body)
		}
		for j := 0; j+1 < len(st.want); j += 2 {
			name, want := st.want[j], st.want[j+1]
			got, ok := resp.Header[http.CanonicalHeaderKey(name)]
			switch {
			case want == absent && ok:
				t.Errorf("step %d: %s %q, want none", i+1, name, got)
			case want == present && !ok:
				t.Errorf("step %d: no %s", i+1, name)
			case want != absent && want != present && strings.Join(got, ", ") != want:
				t.Errorf("step %d: %s %q, want %q", i+1, name, got, want)
			}
		}
		if st.origin >= 0 {
			waitOrigin(t, origin, st.origin, st.eventually, i+1)
		}
		if st.check != nil {
			st.check(t, resp, origin.requests())
		}
	}
}

// sendStep sends req (again, for until) and reads its answer.
func sendStep(t *testing.T, req *http.Request, step int) (*http.Response, []byte) {
	t.Helper()
	resp, err := client.Do(req.Clone(req.Context()))
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, body
}

// waitOrigin checks the origin's request count; a background refresh may
// take a moment to reach it, so eventually polls the count (a state of the
// origin, not a stand-in for synchronisation) for up to 10 s.
func waitOrigin(t *testing.T, origin *scripted, want int, eventually bool, step int) {
	t.Helper()
	if eventually {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for deadline := time.Now().Add(10 * time.Second); len(origin.requests()) < want && time.Now().Before(deadline); <-tick.C {
		}
	}
	if got := len(origin.requests()); got != want {
		t.Errorf("step %d: the origin saw %d requests, want %d", step, got, want)
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
