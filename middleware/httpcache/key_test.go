package httpcache

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/hashtag"
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
	return fields{r.TLS != nil, r.Host, rawPath(r.URL), target, canonicalQuery(nil, r.URL.RawQuery), r.Header["Accept-Language"]}
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
		in1 := appendKeyInput(nil, r1, r1.Host, headers, true)
		in2 := appendKeyInput(nil, r2, r2.Host, headers, true)
		same := equalFields(fieldsOf(r1), fieldsOf(r2))
		if bytes.Equal(in1, in2) != same {
			t.Fatalf("encodings equal %v, fields equal %v:\n%q %q\n%q %q", !same, same, h1, t1, h2, t2)
		}
		if (defaultKey(r1, headers) == defaultKey(r2, headers)) != same {
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
				if defaultKey(r1, headers) != defaultKey(r3, headers) {
					t.Fatalf("query %q and %q have different keys", q, r3.URL.RawQuery)
				}
			}
		}
	})
}

func TestKeyFormat(t *testing.T) {
	k := defaultKey(request("a", "/a", false, ""), nil)
	tag, ok := hashtag.Tag(k)
	if !ok || len(tag) != 22 || !strings.HasPrefix(k, "{"+tag+"}"+keyVersion) || len(k) != 2+22+3+43 {
		t.Fatalf("key %q: want {22 base64 characters}%s and 43 base64 characters", k, keyVersion)
	}
	// Every key of one URL carries its tag, whatever else it holds.
	lang := request("a", "/a", false, "")
	lang.Header.Set("Accept-Language", "de")
	fwd := request("a", "/a", false, "")
	fwd.Header.Set("X-Forwarded-Host", "b")
	for _, other := range []string{defaultKey(lang, []string{"Accept-Language"}), defaultKey(fwd, nil)} {
		if t2, _ := hashtag.Tag(other); other == k || t2 != tag {
			t.Errorf("key %q of the same URL: want another key under tag %q", other, tag)
		}
	}
	if t3, _ := hashtag.Tag(defaultKey(request("a", "/b", false, ""), nil)); t3 == tag {
		t.Error("two URLs under one tag")
	}
	head := request("a", "/a", false, "")
	head.Method = http.MethodHead
	if defaultKey(head, nil) != k {
		t.Fatal("HEAD and GET keys differ")
	}
}

// TestDeriveKeyFields: each part of the key, changed alone, changes the
// key, and what is canonical does not.
func TestDeriveKeyFields(t *testing.T) {
	base := func() *http.Request { return request("a.example", "/p?x=1&y=2", false, "fr") }
	headers := []string{"Accept-Language"}
	rows := []struct {
		name string
		edit func(r *http.Request)
		same bool
	}{
		{"scheme", func(r *http.Request) { r.TLS = &tls.ConnectionState{} }, false},
		{"host", func(r *http.Request) { r.Host = "b.example" }, false},
		{"host case", func(r *http.Request) { r.Host = "A.Example" }, false}, // routers match hosts case-sensitively
		{"absolute-form target", func(r *http.Request) { r.URL.Scheme, r.URL.Host = "http", "a.example" }, false},
		{"absolute-form scheme", func(r *http.Request) { r.URL.Scheme, r.URL.Host = "foo", "a.example" }, false},
		{"method", func(r *http.Request) { r.Method = http.MethodOptions }, false},
		{"HEAD is GET", func(r *http.Request) { r.Method = http.MethodHead }, true},
		{"path", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/q", "" }, false},
		{"path escaped differently", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/p", "/%70" }, false},
		{"raw path EscapedPath drops", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/p{", "/p{" }, false},
		{"stale raw path", func(r *http.Request) { r.URL.RawPath = "/old%2Fpath" }, true},
		{"query value", func(r *http.Request) { r.URL.RawQuery = "x=1&y=3" }, false},
		{"query order", func(r *http.Request) { r.URL.RawQuery = "y=2&x=1" }, true},
		{"query escaping", func(r *http.Request) { r.URL.RawQuery = "%78=1&y=%32" }, true},
		{"query semicolon", func(r *http.Request) { r.URL.RawQuery = "x=1;y=2" }, false},
		{"listed header", func(r *http.Request) { r.Header.Set("Accept-Language", "de") }, false},
		{"listed header absent", func(r *http.Request) { r.Header.Del("Accept-Language") }, false},
		{"unlisted header", func(r *http.Request) { r.Header.Set("X-Other", "1") }, true},
		{"client address", func(r *http.Request) { r.Header.Set("X-Forwarded-For", "192.0.2.1") }, true},
		{"Forwarded client address", func(r *http.Request) { r.Header.Set("Forwarded", "for=192.0.2.1") }, false},
	}
	want := defaultKey(base(), headers)
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := base()
			row.edit(r)
			if got := defaultKey(r, headers); (got == want) != row.same {
				t.Errorf("same key %v, want %v", got == want, row.same)
			}
		})
	}
	for _, name := range forwardingHeaders {
		t.Run("forwarding/"+name, func(t *testing.T) {
			r := base()
			r.Header.Set(name, "evil.example")
			if defaultKey(r, headers) == want {
				t.Errorf("%s is not keyed", name)
			}
			if deriveKey(r, r.Host, headers, false) != deriveKey(base(), base().Host, headers, false) {
				t.Errorf("%s is keyed with forwarding unkeyed", name)
			}
		})
	}
	t.Run("length-prefixed", func(t *testing.T) {
		a := request("ab", "/c", false, "")
		b := request("a", "/bc", false, "")
		b.URL.Path = "b/c" // host "a" + path "b/c" concatenates like "ab" + "/c"
		if defaultKey(a, nil) == defaultKey(b, nil) {
			t.Error("host and path run together")
		}
	})
	t.Run("versioned hash", func(t *testing.T) {
		if !strings.Contains(want, "}"+keyVersion) || len(want) != keyLen || strings.Contains(want, "a.example") {
			t.Errorf("key %q: want %q then a base64 SHA-256, no request text", want, keyVersion)
		}
	})
}

// TestCanonicalQuerySorts: canonicalQuery orders pairs as a stable sort by
// name (raw pairs last) would, for generated queries short and long, and a
// long query in reverse order (which anybody can send) costs n log n, not
// n² (an insertion sort over 100,000 pairs takes minutes).
func TestCanonicalQuerySorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 300 {
		n := rng.IntN(3 * shortQuery)
		if rng.IntN(10) == 0 {
			n = rng.IntN(5000)
		}
		segs := make([]string, n)
		for i := range segs {
			switch rng.IntN(8) {
			case 0:
				segs[i] = "a;b" // raw
			case 1:
				segs[i] = "%zz" // raw
			default:
				segs[i] = fmt.Sprintf("k%d=%d", rng.IntN(20), i)
			}
		}
		got := canonicalQuery(nil, strings.Join(segs, "&"))
		want := slices.Clone(got)
		slices.SortStableFunc(want, pairCmp)
		if !slices.Equal(got, want) {
			t.Fatalf("%d pairs: not in stable order", n)
		}
		for i := range got {
			if !got[i].raw && i > 0 && !got[i-1].raw && got[i-1].name == got[i].name {
				a, _ := strconv.Atoi(got[i-1].value)
				b, _ := strconv.Atoi(got[i].value)
				if a > b {
					t.Fatalf("%d pairs: %q's values out of their request order", n, got[i].name)
				}
			}
		}
	}
	var b strings.Builder
	for i := 100_000; i > 0; i-- {
		fmt.Fprintf(&b, "p%07d=&", i)
	}
	done := make(chan []queryPair, 1)
	go func() { done <- canonicalQuery(nil, b.String()) }()
	select {
	case pairs := <-done:
		if len(pairs) != 100_000 || pairs[0].name != "p0000001" {
			t.Fatalf("%d pairs, first %q", len(pairs), pairs[0].name)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a 100,000-pair query in reverse order took over 20s to sort (quadratic)")
	}
}

// TestURLTagSpellings: a path spelled with unreserved characters
// percent-encoded, or with its percent-encodings' hex digits in either
// case, tags as the path does (RFC 3986 §6.2.2), so that an invalidation
// through one spelling reaches the others; an encoded reserved character
// ("%2F", "%3B") stays apart from the character. Generated spellings.
func TestURLTagSpellings(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	hex := func(c byte, upper bool) string {
		const lo, up = "0123456789abcdef", "0123456789ABCDEF"
		digits := lo
		if upper {
			digits = up
		}
		return "%" + string(digits[c>>4]) + string(digits[c&15])
	}
	tag := func(path string) string {
		u, err := url.Parse("http://site.example" + path)
		if err != nil {
			t.Fatalf("parse %q: %v", path, err)
		}
		return urlTag(false, "site.example", u)
	}
	const unreserved = "azAZ09-._~"
	for range 2000 {
		var canon, spelled strings.Builder
		for range 1 + rng.IntN(12) {
			switch k := rng.IntN(4); {
			case k < 2: // an unreserved character, maybe encoded
				c := unreserved[rng.IntN(len(unreserved))]
				canon.WriteByte(c)
				if rng.IntN(3) == 0 {
					spelled.WriteString(hex(c, rng.IntN(2) == 0))
				} else {
					spelled.WriteByte(c)
				}
			case k == 2: // a segment boundary
				canon.WriteByte('/')
				spelled.WriteByte('/')
			default: // a byte that must stay encoded, in either case
				c := []byte{0xc3, 0xa9, ' ', '%'}[rng.IntN(4)]
				canon.WriteString(hex(c, true))
				spelled.WriteString(hex(c, rng.IntN(2) == 0))
			}
		}
		a, b := "/"+canon.String(), "/"+spelled.String()
		if tag(a) != tag(b) {
			t.Fatalf("%q and %q name one path but tag apart", a, b)
		}
	}
	for _, c := range [][2]string{{"/a%2Fb", "/a/b"}, {"/a%3Bb", "/a;b"}, {"/a%3fb", "/a"}} {
		if tag(c[0]) == tag(c[1]) {
			t.Errorf("%q and %q tag alike", c[0], c[1])
		}
	}
	if got := normPath("/%7e%2f%zz%4"); got != "/~%2F%zz%4" {
		t.Errorf("normPath: %q", got)
	}
}
