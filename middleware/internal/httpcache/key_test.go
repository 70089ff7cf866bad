package httpcache

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func request(host, target string, https bool, lang string) *http.Request {
	u, err := url.ParseRequestURI(target)
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	r := &http.Request{Method: http.MethodGet, Host: host, URL: u, Header: http.Header{}}
	if https {
		r.TLS = &tls.ConnectionState{}
	}
	if lang != "" {
		r.Header.Set("Accept-Language", lang)
	}
	return r
}

// fields is what a key must tell apart, computed independently of the
// encoding under test.
type fields struct {
	https      bool
	host, path string
	target     url.URL // the absolute-form parts
	query      []queryPair
	lang       []string
}

func fieldsOf(r *http.Request) fields {
	target := url.URL{Scheme: r.URL.Scheme, Opaque: r.URL.Opaque, User: r.URL.User, Host: r.URL.Host}
	return fields{r.TLS != nil, r.Host, rawPath(r.URL), target, canonicalQuery(r.URL.RawQuery), r.Header["Accept-Language"]}
}

func equalFields(a, b fields) bool {
	return a.https == b.https && a.host == b.host && a.path == b.path &&
		a.target.String() == b.target.String() && (a.target.User == nil) == (b.target.User == nil) &&
		slices.Equal(a.query, b.query) && slices.Equal(a.lang, b.lang)
}

// FuzzKey: two requests share a key exactly when their canonical fields
// agree (the length-prefixed encoding is injective), and a query's
// parameter order does not matter.
func FuzzKey(f *testing.F) {
	f.Add("a", "/a?x=1&y=2", false, "fr", "a", "/a?y=2&x=1", false, "fr")
	f.Add("a", "/a?page=1", false, "", "a", "/a?page=2", false, "")
	f.Add("a", "/a", false, "", "b", "/a", false, "")
	f.Add("ab", "/c", true, "", "a", "/bc", true, "")
	f.Add("a", "/a?x=%zz", false, "", "a", "/a?x=%25zz", false, "")
	f.Add("a", "/a?=&&", false, "x", "a", "/a?", false, "x")
	f.Add("a", "/a?x=1;y", false, "", "a", "/a?x=1%3By", false, "")
	f.Add("a", "/a{b", false, "", "a", "/a%7Bb", false, "")
	f.Add("A", "/a", false, "", "a", "/a", false, "")
	f.Add("a", "http://a/a", false, "", "a", "/a", false, "")
	headers := []string{"Accept-Language"}
	f.Fuzz(func(t *testing.T, h1, t1 string, s1 bool, l1, h2, t2 string, s2 bool, l2 string) {
		r1, r2 := request(h1, t1, s1, l1), request(h2, t2, s2, l2)
		in1 := appendKeyInput(nil, r1, headers, true)
		in2 := appendKeyInput(nil, r2, headers, true)
		same := equalFields(fieldsOf(r1), fieldsOf(r2))
		if bytes.Equal(in1, in2) != same {
			t.Fatalf("encodings equal %v, fields equal %v:\n%q %q\n%q %q", !same, same, h1, t1, h2, t2)
		}
		if (DeriveKey(r1, headers) == DeriveKey(r2, headers)) != same {
			t.Fatalf("keys disagree with fields for %q %q / %q %q", h1, t1, h2, t2)
		}
		// Reversing the parameters of distinct names keeps the key.
		if q := r1.URL.RawQuery; q != "" {
			segs := strings.Split(q, "&")
			names := map[string]bool{}
			distinct := true
			for _, s := range segs {
				n, _, _ := strings.Cut(s, "=")
				if un, err := url.QueryUnescape(n); err != nil || names[un] {
					distinct = false
				} else {
					names[un] = true
				}
			}
			if distinct {
				slices.Reverse(segs)
				r3 := request(h1, t1, s1, l1)
				r3.URL.RawQuery = strings.Join(segs, "&")
				if DeriveKey(r1, headers) != DeriveKey(r3, headers) {
					t.Fatalf("query %q and %q have different keys", q, r3.URL.RawQuery)
				}
			}
		}
	})
}

func TestKeyFormat(t *testing.T) {
	k := DeriveKey(request("a", "/a", false, ""), nil)
	if !strings.HasPrefix(k, "h2:") || len(k) != 3+43 {
		t.Fatalf("key %q: want h2: and 43 base64 characters", k)
	}
	head := request("a", "/a", false, "")
	head.Method = http.MethodHead
	if DeriveKey(head, nil) != k {
		t.Fatal("HEAD and GET keys differ")
	}
}

// FuzzDecodeEntry: decoding never panics, and what decodes re-encodes to
// an entry that decodes alike with no Set-Cookie or hop-by-hop field.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(200, http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}}, []byte("body")))
	f.Add([]byte("shr\x01"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		status, h, body, err := decodeEntry(b)
		if err != nil {
			return
		}
		for k := range h {
			if !storedHeader(http.CanonicalHeaderKey(k), nil) {
				t.Fatalf("decoded forbidden field %q", k)
			}
		}
		s2, h2, b2, err := decodeEntry(encodeEntry(status, h, body))
		if err != nil || s2 != status || !bytes.Equal(b2, body) || len(h2) != len(h) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// forwardedModel is what appendForwarded must tell apart, computed the
// plain way: the lines, each split into elements of trimmed pairs without
// the client's for=; a line with an unterminated quote stays whole.
func forwardedModel(vals []string) string {
	var out []string
	for _, v := range vals {
		var elems [][]string
		var pairs []string
		start, quoted, ok := 0, false, true
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case quoted && c == '\\':
				i++
			case c == '"':
				quoted = !quoted
			case !quoted && (c == ';' || c == ','):
				pairs = append(pairs, strings.TrimSpace(v[start:i]))
				start = i + 1
				if c == ',' {
					elems, pairs = append(elems, pairs), nil
				}
			}
		}
		if quoted {
			ok = false
		}
		elems = append(elems, append(pairs, strings.TrimSpace(v[start:])))
		if !ok {
			out = append(out, fmt.Sprintf("raw %q", v))
			continue
		}
		var kept [][]string
		for _, e := range elems {
			var k []string
			for _, p := range e {
				if !clientPair(p) {
					k = append(k, p)
				}
			}
			kept = append(kept, k)
		}
		out = append(out, fmt.Sprintf("%q", kept))
	}
	return fmt.Sprintf("%q", out)
}

// FuzzForwarded: two Forwarded fields share a key exactly when their
// models agree.
func FuzzForwarded(f *testing.F) {
	f.Add("for=192.0.2.1;proto=https", "for=198.51.100.7;proto=https")
	f.Add(`for="x;host=evil"`, "for=x")
	f.Add("for=1, host=a", "host=a")
	f.Add(`host="a\"b", for=1`, `host="a\"b"`)
	f.Add(`for="unterminated`, `for="unterminated;x`)
	f.Fuzz(func(t *testing.T, a, b string) {
		enc := func(v string) []byte { return appendForwarded(nil, strings.Split(v, "\n")) }
		model := func(v string) string { return forwardedModel(strings.Split(v, "\n")) }
		if got, want := bytes.Equal(enc(a), enc(b)), model(a) == model(b); got != want {
			t.Fatalf("%q and %q: same encoding %v, same model %v", a, b, got, want)
		}
	})
}
