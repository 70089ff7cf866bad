package httpcache

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"
)

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
		{"host case", func(r *http.Request) { r.Host = "A.Example" }, true},
		{"method", func(r *http.Request) { r.Method = http.MethodOptions }, false},
		{"HEAD is GET", func(r *http.Request) { r.Method = http.MethodHead }, true},
		{"path", func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/q", "" }, false},
		{"query value", func(r *http.Request) { r.URL.RawQuery = "x=1&y=3" }, false},
		{"query order", func(r *http.Request) { r.URL.RawQuery = "y=2&x=1" }, true},
		{"query escaping", func(r *http.Request) { r.URL.RawQuery = "%78=1&y=%32" }, true},
		{"listed header", func(r *http.Request) { r.Header.Set("Accept-Language", "de") }, false},
		{"listed header absent", func(r *http.Request) { r.Header.Del("Accept-Language") }, false},
		{"unlisted header", func(r *http.Request) { r.Header.Set("X-Other", "1") }, true},
	}
	want := DeriveKey(base(), headers)
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := base()
			row.edit(r)
			if got := DeriveKey(r, headers); (got == want) != row.same {
				t.Errorf("same key %v, want %v", got == want, row.same)
			}
		})
	}
	t.Run("length-prefixed", func(t *testing.T) {
		a := request("ab", "/c", false, "")
		b := request("a", "/bc", false, "")
		b.URL.Path = "b/c" // host "a" + path "b/c" concatenates like "ab" + "/c"
		if DeriveKey(a, nil) == DeriveKey(b, nil) {
			t.Error("host and path run together")
		}
	})
	t.Run("versioned hash", func(t *testing.T) {
		if !strings.HasPrefix(want, keyVersion) || len(want) != len(keyVersion)+43 || strings.Contains(want, "a.example") {
			t.Errorf("key %q: want %q then a base64 SHA-256, no request text", want, keyVersion)
		}
	})
}

func TestUpstreamWindowsParse(t *testing.T) {
	const s = time.Second
	rows := []struct {
		cc, age string
		want    windows
		ok      bool
	}{
		{cc: "", ok: false},
		{cc: "public", ok: false},
		{cc: "max-age=10", want: windows{fresh: 10 * s, freshSet: true}, ok: true},
		{cc: "max-age=10, s-maxage=20", want: windows{fresh: 20 * s, freshSet: true}, ok: true},
		{cc: "S-MaxAge=5, max-age=20", want: windows{fresh: 5 * s, freshSet: true}, ok: true},
		{cc: "max-age=60", age: "55", want: windows{fresh: 5 * s, freshSet: true}, ok: true},
		{cc: "max-age=60", age: "90", want: windows{fresh: 0, freshSet: true}, ok: true},
		{cc: "max-age=10, stale-while-revalidate=30", want: windows{fresh: 10 * s, stale: 30 * s, freshSet: true}, ok: true},
		{cc: "max-age=10, stale-if-error=40", want: windows{fresh: 10 * s, stale: 40 * s, freshSet: true}, ok: true},
		{cc: "max-age=10, stale-while-revalidate=30, stale-if-error=20", want: windows{fresh: 10 * s, stale: 30 * s, freshSet: true}, ok: true},
		{cc: "stale-while-revalidate=30", want: windows{stale: 30 * s}, ok: true},
		{cc: `max-age="7"`, want: windows{fresh: 7 * s, freshSet: true}, ok: true},
		{cc: "max-age=soon", want: windows{fresh: 0, freshSet: true}, ok: true},
		{cc: "max-age=5, max-age=50", want: windows{fresh: 5 * s, freshSet: true}, ok: true},
	}
	for _, row := range rows {
		h := http.Header{}
		if row.cc != "" {
			h.Set("Cache-Control", row.cc)
		}
		if row.age != "" {
			h.Set("Age", row.age)
		}
		got, ok := upstreamWindows(h)
		if ok != row.ok || (ok && got != row.want) {
			t.Errorf("%q (Age %q): got %+v, %v; want %+v, %v", row.cc, row.age, got, ok, row.want, row.ok)
		}
	}
}
