package conformance

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// byMethod answers a GET (or HEAD) with a fresh response whose body is
// the origin's request count, and any other method with unsafe, adding
// loc to it.
func byMethod(unsafe int, loc ...string) originFunc {
	return func(n int, r *http.Request) reply {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return reply{200, []string{"Cache-Control", "max-age=3600", "Vary", "Accept-Language"}, fmt.Sprint("get ", n)}
		}
		return reply{unsafe, loc, "done"}
	}
}

// invalidationRows: RFC 9111 §4.4, in the strict and the zero Config.
func invalidationRows() []rfcRow {
	var rows []rfcRow
	hit := []string{"Cache-Status", "stampede; hit"}
	for _, c := range []struct {
		name string
		cfg  *Config
	}{{"strict", nil}, {"zero Config", &Config{}}} {
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "M-SEARCH"} {
			rows = append(rows, rfcRow{"§4.4", c.name + ": a 2xx to " + m + " invalidates the target URI", c.cfg, byMethod(200),
				[]step{{body: text("get 1"), origin: 1}, {body: text("get 1"), origin: 1, want: hit},
					{method: m, body: text("done"), origin: 2}, {body: text("get 3"), origin: 3}}})
		}
		rows = append(rows,
			rfcRow{"§4.4", c.name + ": a 3xx to POST invalidates", c.cfg, byMethod(303, "Location", "/elsewhere"),
				[]step{{origin: 1}, {method: "POST", status: 303, origin: 2}, {body: text("get 3"), origin: 3}}},
			rfcRow{"§4.4", c.name + ": an error (500) to POST invalidates nothing", c.cfg, byMethod(500),
				[]step{{origin: 1}, {method: "POST", status: 500, origin: 2}, {body: text("get 1"), origin: 2, want: hit}}},
			rfcRow{"§4.4", c.name + ": an error (404) to DELETE invalidates nothing", c.cfg, byMethod(404),
				[]step{{origin: 1}, {method: "DELETE", status: 404, origin: 2}, {body: text("get 1"), origin: 2, want: hit}}},
			rfcRow{"§4.4", c.name + ": every Vary variant of the target URI", c.cfg, byMethod(204),
				[]step{{header: []string{"Accept-Language", "en"}, body: text("get 1"), origin: 1},
					{header: []string{"Accept-Language", "de"}, body: text("get 2"), origin: 2},
					{header: []string{"Accept-Language", "de"}, origin: 2, want: hit},
					{method: "POST", status: 204, origin: 3},
					{header: []string{"Accept-Language", "en"}, body: text("get 4"), origin: 4},
					{header: []string{"Accept-Language", "de"}, body: text("get 5"), origin: 5}}},
			rfcRow{"§4.4", c.name + ": Location of the same origin", c.cfg, byMethod(201, "Location", "/r2"),
				[]step{{path: "/r2", body: text("get 1"), origin: 1}, {path: "/r2", origin: 1, want: hit},
					{method: "POST", status: 201, origin: 2}, {path: "/r2", body: text("get 3"), origin: 3}}},
			rfcRow{"§4.4", c.name + ": Content-Location of the same origin, absolute", c.cfg, byMethod(200, "Content-Location", "http://cache.example/r2?x=1"),
				[]step{{path: "/r2?x=1", body: text("get 1"), origin: 1}, {method: "PUT", origin: 2}, {path: "/r2?x=1", body: text("get 3"), origin: 3}}},
			rfcRow{"§4.4", c.name + ": Location of another origin invalidates nothing there", c.cfg, byMethod(201, "Location", "http://other.example/r2"),
				[]step{{path: "/r2", body: text("get 1"), origin: 1}, {method: "POST", status: 201, origin: 2},
					{path: "/r2", body: text("get 1"), origin: 2, want: hit}}},
		)
	}
	rows = append(rows, rfcRow{"§4.4", "KeyHeaders: every keyed value of the target URI", &Config{KeyHeaders: []string{"X-Tenant"}}, byMethod(200),
		[]step{{header: []string{"X-Tenant", "a"}, body: text("get 1"), origin: 1},
			{header: []string{"X-Tenant", "b"}, body: text("get 2"), origin: 2},
			{method: "POST", origin: 3},
			{header: []string{"X-Tenant", "a"}, body: text("get 4"), origin: 4},
			{header: []string{"X-Tenant", "b"}, body: text("get 5"), origin: 5}}})
	return rows
}

// invalidationAcrossServers: a POST through one of three servers (three
// Groups on one Redis), and the next GET on each of the other two is a
// miss, for every Vary variant; a failed POST invalidates nothing.
func invalidationAcrossServers(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var gets atomic.Int64
	var fail atomic.Bool
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			if fail.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprint(w, "get ", gets.Add(1))
	})
	ns := redistest.Key(t) + ":"
	var urls []string
	for range 3 {
		g := NewGroup(t, top.client(t), guard.Options{Namespace: ns})
		urls = append(urls, quietServer(t, a.New(g, strict, origin)).URL)
	}
	do := func(base, method, lang string) (int, string, string) {
		req, _ := http.NewRequest(method, base+"/users/42", nil)
		req.Host = "shop.example"
		req.Header.Set("Accept-Language", lang)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), resp.Header.Get("Cache-Status")
	}
	old := map[string]bool{}
	for _, lang := range []string{"en", "de"} {
		_, body, _ := do(urls[0], http.MethodGet, lang)
		old[body] = true
		for _, u := range urls[1:] {
			if _, _, cs := do(u, http.MethodGet, lang); cs != "stampede; hit" {
				t.Fatalf("%s before the POST: Cache-Status %q, want a hit", lang, cs)
			}
		}
	}
	fail.Store(true)
	if st, _, _ := do(urls[0], http.MethodPost, "en"); st != 500 {
		t.Fatalf("POST answered %d, want 500", st)
	}
	if _, _, cs := do(urls[1], http.MethodGet, "de"); cs != "stampede; hit" {
		t.Errorf("after a failed POST: Cache-Status %q, want a hit", cs)
	}
	fail.Store(false)
	if st, _, _ := do(urls[0], http.MethodPost, "en"); st != 200 {
		t.Fatalf("POST answered %d, want 200", st)
	}
	for _, u := range urls[1:] {
		for _, lang := range []string{"en", "de"} {
			if _, body, _ := do(u, http.MethodGet, lang); old[body] {
				t.Errorf("%s on another server after the POST: the old response %q", lang, body)
			}
		}
	}
}

// invalidationReadYourWrites: a client that has the answer to its PUT
// through one server never reads the old response again from another, not
// even when it asks at once, while that server is busy with other
// requests: its in-process tier must not serve a copy whose invalidation
// has reached the host but not yet been applied (the fence of guard's
// tier). Many rounds, because the window it closes is short: before the
// fence, 1 to 3 % of such reads got the old response (found by an outside
// attack); HEAD, a conditional GET and a Range request were answered from
// the old copy too.
func invalidationReadYourWrites(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var version atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			version.Add(1)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		v := version.Load()
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, v))
		fmt.Fprintf(w, "v%d", v)
	})
	ns := redistest.Key(t) + ":"
	var urls []string
	for range 2 {
		g := NewGroup(t, top.client(t), guard.Options{Namespace: ns})
		urls = append(urls, quietServer(t, a.New(g, strict, origin)).URL)
	}
	// Other traffic on B, so that its report goroutine competes for the
	// processor as it would in production.
	defer busyTraffic(t, urls[1])()
	const rounds = 400
	old := 0
	for i := range rounds {
		// B holds version i in its tier.
		for range 2 {
			if _, _, err := shopRequest(urls[1], http.MethodGet, "/users/42"); err != nil {
				t.Fatal(err)
			}
		}
		if resp, _, err := shopRequest(urls[0], http.MethodPut, "/users/42"); err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("PUT: %v %v", resp, err)
		}
		want := fmt.Sprintf("v%d", version.Load())
		etag := fmt.Sprintf(`"v%d"`, version.Load()-1)
		resp, body, bad, err := readAfterPut(urls[1], i, want, etag)
		if err != nil {
			t.Fatal(err)
		}
		if bad {
			if old++; old <= 3 {
				t.Errorf("round %d: after the PUT through A was answered, B answered %d %q with ETag %s (Cache-Status %q), want %s",
					i, resp.StatusCode, body, resp.Header.Get("ETag"), resp.Header.Get("Cache-Status"), want)
			}
		}
	}
	if old > 0 {
		t.Errorf("%d of %d reads through B after a PUT through A had been answered got the old response", old, rounds)
	}
}

// readAfterPut sends round i's read of /users/42 to base, one of four in
// turn: a GET, a HEAD, a conditional GET with the old validator etag, a
// Range request. bad reports an answer that is not version want.
func readAfterPut(base string, i int, want, etag string) (resp *http.Response, body string, bad bool, err error) {
	switch i % 4 {
	case 0:
		resp, body, err = shopRequest(base, http.MethodGet, "/users/42")
		bad = body != want
	case 1:
		resp, _, err = shopRequest(base, http.MethodHead, "/users/42")
		bad = err == nil && resp.Header.Get("ETag") != `"`+want+`"`
	case 2:
		resp, body, err = shopRequest(base, http.MethodGet, "/users/42", "If-None-Match", etag)
		bad = err == nil && (resp.StatusCode != http.StatusOK || body != want)
	case 3:
		resp, body, err = shopRequest(base, http.MethodGet, "/users/42", "Range", "bytes=0-0")
		bad = err == nil && resp.Header.Get("ETag") != `"`+want+`"`
	}
	return resp, body, bad, err
}

// busyTraffic sends GETs of other paths to base from two goroutines until
// the returned func is called, which waits for them.
func busyTraffic(t *testing.T, base string) (stop func()) {
	done := make(chan struct{})
	var busy sync.WaitGroup
	for i := range 2 {
		busy.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, _, err := shopRequest(base, http.MethodGet, fmt.Sprintf("/other/%d", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	return func() {
		close(done)
		busy.Wait()
	}
}

// shopRequest sends method path to base for Host shop.example, with the
// header pairs given, and reads the whole answer.
func shopRequest(base, method, path string, header ...string) (*http.Response, string, error) {
	req, _ := http.NewRequest(method, base+path, nil)
	req.Host = "shop.example"
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// invalidationSpellings: an unsafe request invalidates its target however
// the target is spelled (RFC 9110 §7.1: the same target URI), in either
// direction: an absolute-form request line and an origin-form one, the Host
// in another case or with its default port, a path whose percent-encodings
// differ (RFC 3986 §6.2.2: "/%75sers" is "/users"); and a Location naming the site
// by the public name Config.KeyHost keys, or its host in upper case.
func invalidationSpellings(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var gets atomic.Int64
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			if loc := r.Header.Get("X-Location"); loc != "" {
				w.Header().Set("Location", loc)
				w.WriteHeader(http.StatusSeeOther)
			}
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, "get ", gets.Add(1))
	})
	for _, c := range []struct {
		name       string
		cfg        Config
		get, write string // raw request heads, without the final CRLF
	}{
		{"absolute-form write, origin-form read", strict,
			"GET /u HTTP/1.1\r\nHost: site.example", "PUT http://site.example/u HTTP/1.1\r\nHost: site.example\r\nContent-Length: 0"},
		{"origin-form write, absolute-form read", strict,
			"GET http://site.example/u HTTP/1.1\r\nHost: site.example", "PUT /u HTTP/1.1\r\nHost: site.example\r\nContent-Length: 0"},
		{"Host in another case", strict,
			"GET /u HTTP/1.1\r\nHost: SITE.example", "DELETE /u HTTP/1.1\r\nHost: site.example"},
		{"Host with its default port", strict,
			"GET /u HTTP/1.1\r\nHost: site.example:80", "DELETE /u HTTP/1.1\r\nHost: site.example"},
		{"Location in upper case", strict,
			"GET /items/1 HTTP/1.1\r\nHost: site.example", "POST /items HTTP/1.1\r\nHost: site.example\r\nX-Location: http://SITE.EXAMPLE/items/1\r\nContent-Length: 0"},
		{"an unreserved character percent-encoded", strict,
			"GET /%75sers/42 HTTP/1.1\r\nHost: site.example", "PUT /users/42 HTTP/1.1\r\nHost: site.example\r\nContent-Length: 0"},
		{"the plain spelling read, the encoded one written", strict,
			"GET /users/42 HTTP/1.1\r\nHost: site.example", "DELETE /%75sers/42 HTTP/1.1\r\nHost: site.example"},
		{"percent-encoding in lower-case hex", strict,
			"GET /caf%C3%A9 HTTP/1.1\r\nHost: site.example", "DELETE /caf%c3%a9 HTTP/1.1\r\nHost: site.example"},
		{"Location by the KeyHost name", Config{KeyHost: "www.example.com"},
			"GET /items/1 HTTP/1.1\r\nHost: 10.0.0.7:8080", "POST /items HTTP/1.1\r\nHost: 10.0.0.7:8080\r\nX-Location: http://www.example.com/items/1\r\nContent-Length: 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewGroup(t, top.client(t), guard.Options{})
			srv := quietServer(t, a.New(g, c.cfg, origin))
			addr := srv.Listener.Addr().String()
			get := c.get + "\r\nConnection: close\r\n\r\n"
			first := send(t, addr, get)
			if again := send(t, addr, get); again.body != first.body || again.cacheStatus != "stampede; hit" {
				t.Fatalf("before the write: %+v, want a hit of %q", again, first.body)
			}
			if w := send(t, addr, c.write+"\r\nConnection: close\r\n\r\n"); w.status >= 400 {
				t.Fatalf("the write answered %d", w.status)
			}
			if after := send(t, addr, get); after.body == first.body {
				t.Errorf("after the write: %+v, the old response", after)
			}
		})
	}
}

// invalidationKeyHost: a load balancer that rewrites Host to each
// backend's address reaches server A as 10.0.0.1:8080 and server B as
// 10.0.0.2:8080. Without Config.KeyHost each Host keys the URL apart, so a
// PUT through A drops A's entry only, and B goes on serving the old
// response until it expires; with KeyHost both share one entry, which the
// PUT drops.
func invalidationKeyHost(t *testing.T, a Adapter, top topology) {
	for _, c := range []struct {
		keyHost     string
		want, cache string // B's answer after the PUT through A
	}{
		{"", "v0", "stampede; hit"},
		{"shop.example", "v1", "stampede; fwd=miss; stored"},
	} {
		t.Run(fmt.Sprintf("KeyHost %q", c.keyHost), func(t *testing.T) {
			noLeaks(t)
			var version atomic.Int64
			origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut {
					version.Add(1)
					w.WriteHeader(http.StatusNoContent)
					return
				}
				fmt.Fprintf(w, "v%d", version.Load())
			})
			ns := redistest.Key(t) + ":"
			type backend struct{ url, host string }
			var servers []backend
			for _, host := range []string{"10.0.0.1:8080", "10.0.0.2:8080"} {
				g := NewGroup(t, top.client(t), guard.Options{Namespace: ns})
				servers = append(servers, backend{quietServer(t, a.New(g, Config{KeyHost: c.keyHost}, origin)).URL, host})
			}
			do := func(to backend, method string) (status int, body, cacheStatus string) {
				req, _ := http.NewRequest(method, to.url+"/users/42", nil)
				req.Host = to.host
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header.Get("Cache-Status")
			}
			A, B := servers[0], servers[1]
			for _, b := range []backend{A, B, B} {
				if _, body, _ := do(b, http.MethodGet); body != "v0" {
					t.Fatalf("GET before the PUT: %q, want v0", body)
				}
			}
			if st, _, _ := do(A, http.MethodPut); st != http.StatusNoContent {
				t.Fatalf("PUT through A: %d, want 204", st)
			}
			if _, body, cs := do(B, http.MethodGet); body != c.want || cs != c.cache {
				t.Errorf("GET through B after the PUT through A: %q (Cache-Status %q), want %q (%q)", body, cs, c.want, c.cache)
			}
		})
	}
}
