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
	for _, name := range forwardingHeaders {
		t.Run("forwarding/"+name, func(t *testing.T) {
			r := base()
			r.Header.Set(name, "evil.example")
			if DeriveKey(r, headers) == want {
				t.Errorf("%s is not keyed", name)
			}
			if deriveKey(r, headers, false) != deriveKey(base(), headers, false) {
				t.Errorf("%s is keyed with forwarding unkeyed", name)
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

// TestForwardedKey: Forwarded is keyed without the pairs that only name
// the client, and with everything else as sent.
func TestForwardedKey(t *testing.T) {
	key := func(vals ...string) string {
		r := request("a.example", "/p", false, "")
		r.Header["Forwarded"] = vals
		return DeriveKey(r, nil)
	}
	rows := []struct {
		name string
		a, b []string
		same bool
	}{
		{"client address differs", []string{"for=192.0.2.1;proto=https"}, []string{"for=198.51.100.7;proto=https"}, true},
		{"quoted IPv6 and port", []string{`for="[2001:db8::1]:4711";host=a`}, []string{"for=_hidden;host=a"}, true},
		{"for name case", []string{"For=192.0.2.1;host=a"}, []string{"for=192.0.2.2;host=a"}, true},
		{"host differs", []string{"for=192.0.2.1;host=a"}, []string{"for=192.0.2.1;host=evil"}, false},
		{"proto differs", []string{"proto=https"}, []string{"proto=http"}, false},
		{"elements kept apart", []string{"for=192.0.2.1, host=a"}, []string{"host=a"}, false},
		{"lines kept apart", []string{"host=a", "proto=https"}, []string{"host=a, proto=https"}, false},
		{"quoted separator smuggled in for", []string{`for="x;host=evil"`}, []string{"for=x"}, false},
		{"unterminated quote kept whole", []string{`for="192.0.2.1;host=a`}, []string{`for="192.0.2.2;host=a`}, false},
		{"empty for kept", []string{"for="}, []string{"for=x"}, false},
		{"present and absent", []string{"for=192.0.2.1"}, nil, false},
	}
	for _, row := range rows {
		if got := key(row.a...) == key(row.b...); got != row.same {
			t.Errorf("%s: %q and %q share a key: %v, want %v", row.name, row.a, row.b, got, row.same)
		}
	}
}

// TestMethodOverrideBypasses: a GET asking to be another method is not
// shared.
func TestMethodOverrideBypasses(t *testing.T) {
	e := &Engine{}
	for _, name := range methodOverrideHeaders {
		r := request("a.example", "/p", false, "")
		r.Header.Set(name, "DELETE")
		if got := e.bypass(r); got != "method override" {
			t.Errorf("%s: bypass %q", name, got)
		}
	}
}

// TestForwardingListFits: appendForwarding marks the headers present in a
// fixed array and skips names not starting with X or F.
func TestForwardingListFits(t *testing.T) {
	if len(forwardingHeaders) > 32 {
		t.Fatalf("%d forwarding headers, appendForwarding holds 32", len(forwardingHeaders))
	}
	for i, name := range forwardingHeaders {
		if name != http.CanonicalHeaderKey(name) || (name[0] != 'X' && name[0] != 'F') {
			t.Errorf("%q: want a canonical name starting with X or F", name)
		}
		if i > 0 && forwardingHeaders[i-1] >= name {
			t.Errorf("%q: the list is not sorted", name)
		}
	}
}

// TestVaryOnForwarding: a response may vary on a forwarding header while
// the key holds it whole; Forwarded is held without its for= pairs, so a
// response varying on it is not shared unless KeyHeaders lists it.
func TestVaryOnForwarding(t *testing.T) {
	rows := []struct {
		vary          string
		forwarding    bool
		keyHeaders    []string
		wantShareable bool
	}{
		{"X-Forwarded-Proto", true, nil, true},
		{"x-forwarded-host", true, nil, true},
		{"X-Forwarded-Proto", false, nil, false},
		{"X-Forwarded-Proto", false, []string{"X-Forwarded-Proto"}, true},
		{"Forwarded", true, nil, false},
		{"Forwarded", true, []string{"Forwarded"}, true},
		{"X-Forwarded-For", true, nil, false},
	}
	for _, row := range rows {
		e := &Engine{forwarding: row.forwarding, keyHeaders: canonicalHeaders(row.keyHeaders)}
		e.statuses[200] = true
		if got := e.shareable(200, http.Header{"Vary": {row.vary}}); got != row.wantShareable {
			t.Errorf("Vary: %s, forwarding keyed %v, KeyHeaders %v: shareable %v, want %v",
				row.vary, row.forwarding, row.keyHeaders, got, row.wantShareable)
		}
	}
}
