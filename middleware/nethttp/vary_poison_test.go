package guardhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// TestVarySpellingChoosesNothing: a variant was selected by the
// normalised values of the fields a response varies on (lines combined,
// a language list's case folded), but the handler reads them as they
// came: Header.Get the first line alone, a language tag by its case. A
// client that sent a rare spelling first filled the variant every client
// of the common spelling was then served ("FR-FR" answered "en", served
// to "fr-fr"; two lines "de-CH", "fr" answered by the first, served to
// "de-CH,fr"). Each spelling is a variant of its own now: every client
// gets what the handler answers its own request.
func TestVarySpellingChoosesNothing(t *testing.T) {
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{})
	h := guardhttp.Middleware(g, guardhttp.Config{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		lang := "en"
		for m := range strings.SplitSeq(r.Header.Get("Accept-Language"), ",") { // the first line; case kept
			if strings.HasPrefix(strings.TrimSpace(m), "fr") {
				lang = "fr"
				break
			}
		}
		fmt.Fprintf(w, "lang=%s", lang)
	}))
	ask := func(path string, vals ...string) string {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header["Accept-Language"] = vals
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Body.String()
	}
	for _, c := range []struct {
		name           string
		attack, victim []string
	}{
		{"case", []string{"FR-FR,FR;q=0.9"}, []string{"fr-fr,fr;q=0.9"}},
		{"lines", []string{"de-CH", "fr;q=0.9"}, []string{"de-CH,fr;q=0.9"}},
	} {
		path := "/home/" + c.name
		if got := ask(path, c.attack...); got != "lang=en" {
			t.Fatalf("%s: the first request got %q; the case is wrong", c.name, got)
		}
		if got := ask(path, c.victim...); got != "lang=fr" {
			t.Errorf("%s: after %q, a request of %q got %q; its handler answers lang=fr", c.name, c.attack, c.victim, got)
		}
	}
}

// TestVaryHostUnderKeyHost: with KeyHost set, a response that varies on
// Host was shared across hosts: the variant read Host from r.Header,
// where net/http never leaves it. It reads r.Host now.
func TestVaryHostUnderKeyHost(t *testing.T) {
	g := newGroup(t, redistest.Shared(t).Client(t), guard.Options{})
	var calls atomic.Int64
	h := guardhttp.Middleware(g, guardhttp.Config{KeyHost: "shop.example"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Host")
		fmt.Fprintf(w, "host=%s", r.Host)
	}))
	for _, host := range []string{"a.example", "b.example", "a.example"} {
		r := httptest.NewRequest(http.MethodGet, "/p", nil)
		r.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if got := rec.Body.String(); got != "host="+host {
			t.Errorf("a request for %s got %q (%s)", host, got, rec.Header().Get("Cache-Status"))
		}
	}
	if calls.Load() != 2 {
		t.Errorf("%d handler calls for two hosts, each asked again; want 2", calls.Load())
	}
}
