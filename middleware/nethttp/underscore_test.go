package guardhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// cgiHeader is how CGI, WSGI, Rack and PHP servers name a request field:
// "-" and "_" both become "_", so X_Forwarded_Host and X-Forwarded-Host
// are one field to them (HTTP_X_FORWARDED_HOST).
func cgiHeader(h http.Header, name string) string {
	want := strings.ReplaceAll(strings.ToUpper(name), "-", "_")
	for k, v := range h {
		if strings.ReplaceAll(strings.ToUpper(k), "-", "_") == want && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// TestUnderscoreNamesNotShared: a field named with underscores
// (X_Forwarded_Host, Accept_Language) is another field to Go, so the key
// did not hold it, nor did a proxy in the handler drop it; an upstream in
// the CGI tradition reads it as the dashed field. One request through a
// node of the fleet stored an answer built for evil.example, and a clean
// request through another node was served it as a hit; likewise a
// variant chosen by Accept_Language stored under another. A request
// carrying such a name is not shared now (nginx drops such fields by
// default for this reason): its handler answers it alone.
func TestUnderscoreNamesNotShared(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := cgiHeader(r.Header, "X-Forwarded-Host")
		if host == "" {
			host = r.Host
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		_, _ = io.WriteString(w, `<a href="https://`+host+`/next">`+cgiHeader(r.Header, "Accept-Language")+`</a>`)
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Shared(t).Client(t)
	ns := redistest.Key(t) + ":"
	var nodes []*httptest.Server
	for range 2 {
		g := newGroup(t, rdb, guard.Options{Namespace: ns})
		srv := httptest.NewServer(guardhttp.Middleware(g, guardhttp.Config{})(httputil.NewSingleHostReverseProxy(u)))
		defer srv.Close()
		nodes = append(nodes, srv)
	}
	for _, attack := range []string{"X_Forwarded_Host", "X_FORWARDED_HOST", "Accept_Language"} {
		t.Run(attack, func(t *testing.T) {
			path := "/page/" + attack
			req, err := http.NewRequest(http.MethodGet, nodes[0].URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "site.example" // the fleet's name, on every node
			req.Header[attack] = []string{"evil.example"}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if cs := resp.Header.Get("Cache-Status"); !strings.Contains(cs, "bypass") {
				t.Errorf("the request with %s: Cache-Status %q, want bypass", attack, cs)
			}
			creq, err := http.NewRequest(http.MethodGet, nodes[1].URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			creq.Host = "site.example"
			clean, err := http.DefaultClient.Do(creq)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(clean.Body)
			_ = clean.Body.Close()
			if strings.Contains(string(b), "evil.example") {
				t.Errorf("a clean request on another node was served %q (%s)", b, clean.Header.Get("Cache-Status"))
			}
		})
	}
}
