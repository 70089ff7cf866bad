package httpcache

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// memoEngine is an engine with the key settings of cfg: derived needs no
// Group.
func memoEngine(cfg Config[*http.Request]) *engine { return newEngine(nil, &cfg) }

// TestKeyMemo: a key taken from the memo is the key deriveKey gives the
// request, for every part of a request the key reads changed alone, with
// every key setting, the first time and the times after.
func TestKeyMemo(t *testing.T) {
	edits := map[string]func(r *http.Request){
		"none":                 func(*http.Request) {},
		"scheme":               func(r *http.Request) { r.TLS = &tls.ConnectionState{} },
		"host":                 func(r *http.Request) { r.Host = "b.example" },
		"host case":            func(r *http.Request) { r.Host = "A.Example" },
		"absolute-form":        func(r *http.Request) { r.URL.Scheme, r.URL.Host = "http", "a.example" },
		"opaque":               func(r *http.Request) { r.URL.Opaque = "//a.example/p" },
		"user":                 func(r *http.Request) { r.URL.User = url.User("u") },
		"HEAD":                 func(r *http.Request) { r.Method = http.MethodHead },
		"path":                 func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/q", "" },
		"path escaped":         func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/p", "/%70" },
		"raw path dropped":     func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/p{", "/p{" },
		"stale raw path":       func(r *http.Request) { r.URL.RawPath = "/old%2Fpath" },
		"query value":          func(r *http.Request) { r.URL.RawQuery = "x=1&y=3" },
		"query order":          func(r *http.Request) { r.URL.RawQuery = "y=2&x=1" },
		"query escaping":       func(r *http.Request) { r.URL.RawQuery = "%78=1&y=%32" },
		"keyed header":         func(r *http.Request) { r.Header.Set("Accept-Language", "de") },
		"keyed header twice":   func(r *http.Request) { r.Header.Add("Accept-Language", "de") },
		"keyed header absent":  func(r *http.Request) { r.Header.Del("Accept-Language") },
		"unkeyed header":       func(r *http.Request) { r.Header.Set("X-Other", "1") },
		"forwarded host":       func(r *http.Request) { r.Header.Set("X-Forwarded-Host", "evil.example") },
		"forwarded client":     func(r *http.Request) { r.Header.Set("Forwarded", "for=192.0.2.1") },
		"forwarded proto":      func(r *http.Request) { r.Header.Set("Forwarded", "for=192.0.2.1;proto=https") },
		"long target":          func(r *http.Request) { r.URL.RawQuery = "x=" + strings.Repeat("a", maxRawKeyInput) },
		"header into path":     func(r *http.Request) { r.URL.Path = "/p\x02de" },
		"path into host":       func(r *http.Request) { r.Host, r.URL.Path = "a.example/p", "" },
		"query into raw path":  func(r *http.Request) { r.URL.RawPath, r.URL.RawQuery = "/p?x=1", "" },
		"forwarding into lang": func(r *http.Request) { r.Header.Set("Accept-Language", "frX-Forwarded-Host") },
	}
	configs := map[string]Config[*http.Request]{
		"default":            {},
		"keyed header":       {KeyHeaders: []string{"accept-language"}},
		"unkeyed forwarding": {KeyHeaders: []string{"Accept-Language"}, UnkeyedForwarding: true},
		"key host":           {KeyHost: "fixed.example"},
	}
	for cname, cfg := range configs {
		e := memoEngine(cfg)
		for pass := range 2 {
			for name, edit := range edits {
				r := request("a.example", "/p?x=1&y=2", false, "fr")
				edit(r)
				want := deriveKey(r, e.host(r), e.keyHeaders, e.forwarding)
				if got := e.derived(r); got != want {
					t.Errorf("%s, %s, pass %d: key %q, want %q", cname, name, pass, got, want)
				}
			}
		}
	}
}

// TestKeyMemoSlots: requests that share a slot each get their own key,
// however their turns interleave: many more requests than slots, asked in
// one order and then in reverse.
func TestKeyMemoSlots(t *testing.T) {
	e := memoEngine(Config[*http.Request]{})
	var rs []*http.Request
	for i := range 4 * memoSlots {
		rs = append(rs, request("a.example", fmt.Sprintf("/p/%d?q=%d", i%97, i), false, ""))
	}
	check := func(r *http.Request) {
		if got, want := e.derived(r), defaultKey(r, nil); got != want {
			t.Fatalf("%s: key %q, want %q", r.URL, got, want)
		}
	}
	for _, r := range rs {
		check(r)
	}
	for i := len(rs) - 1; i >= 0; i-- {
		check(rs[i])
		check(rs[(i*7)%len(rs)])
	}
}

// FuzzKeyMemo: two requests whose raw inputs agree derive one key (the raw
// input holds all the key reads), and the memo answers each request with
// its own key, whatever it answered before.
func FuzzKeyMemo(f *testing.F) {
	f.Add("a", "/a?x=1&y=2", false, "fr", "", "a", "/a?y=2&x=1", false, "fr", "")
	f.Add("a", "/a", true, "", "b", "A", "/a", true, "", "b")
	f.Add("a", "/a%7Bb", false, "", "", "a", "/a{b", false, "", "")
	f.Add("a", "http://a/a", false, "", "", "a", "/a", false, "", "")
	f.Add("ab", "/c", false, "x", "for=1;host=h", "a", "/bc", false, "x", "for=2;host=h")
	f.Fuzz(func(t *testing.T, h1, t1 string, s1 bool, l1, fw1, h2, t2 string, s2 bool, l2, fw2 string) {
		e := memoEngine(Config[*http.Request]{KeyHeaders: []string{"Accept-Language"}})
		r1, r2 := request(h1, t1, s1, l1), request(h2, t2, s2, l2)
		if fw1 != "" {
			r1.Header.Set("Forwarded", fw1)
		}
		if fw2 != "" {
			r2.Header.Set("Forwarded", fw2)
		}
		k1 := deriveKey(r1, r1.Host, e.keyHeaders, true)
		k2 := deriveKey(r2, r2.Host, e.keyHeaders, true)
		in1, ok1 := appendRawKeyInput(nil, r1, r1.Host, e.keyHeaders, true)
		in2, ok2 := appendRawKeyInput(nil, r2, r2.Host, e.keyHeaders, true)
		if ok1 && ok2 && string(in1) == string(in2) && k1 != k2 {
			t.Fatalf("one raw input, two keys: %q %q / %q %q", h1, t1, h2, t2)
		}
		for _, c := range []struct {
			r    *http.Request
			want string
		}{{r1, k1}, {r2, k2}, {r1, k1}, {r2, k2}} {
			if got := e.derived(c.r); got != c.want {
				t.Fatalf("%q %q: key %q, want %q", c.r.Host, c.r.URL, got, c.want)
			}
		}
	})
}
