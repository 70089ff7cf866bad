package httpcache

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

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

// TestForwardedKey: Forwarded is keyed without the pairs that only name
// the client, and with everything else as sent.
func TestForwardedKey(t *testing.T) {
	key := func(vals ...string) string {
		r := request("a.example", "/p", false, "")
		r.Header["Forwarded"] = vals
		return defaultKey(r, nil)
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

// TestVaryOnForwarding: a response may vary on a forwarding header that the
// key holds whole and still be stored under the URL's key; Forwarded is held
// without its for= pairs, so a response varying on it is stored per variant
// unless KeyHeaders lists it.
func TestVaryOnForwarding(t *testing.T) {
	rows := []struct {
		vary        string
		forwarding  bool
		keyHeaders  []string
		wantVariant bool
	}{
		{"X-Forwarded-Proto", true, nil, false},
		{"x-forwarded-host", true, nil, false},
		{"X-Forwarded-Proto", false, nil, true},
		{"X-Forwarded-Proto", false, []string{"X-Forwarded-Proto"}, false},
		{"Forwarded", true, nil, true},
		{"Forwarded", true, []string{"Forwarded"}, false},
		{"X-Forwarded-For", true, nil, true},
	}
	for _, row := range rows {
		e := &engine{forwarding: row.forwarding, keyHeaders: canonicalHeaders(row.keyHeaders)}
		e.statuses[200] = true
		if !e.shareable(200, http.Header{"Vary": {row.vary}}) {
			t.Errorf("Vary: %s: not shareable", row.vary)
		}
		names, _ := e.varyNames(http.Header{"Vary": {row.vary}})
		if got := len(names) > 0; got != row.wantVariant {
			t.Errorf("Vary: %s, forwarding keyed %v, KeyHeaders %v: stored per variant %v, want %v",
				row.vary, row.forwarding, row.keyHeaders, got, row.wantVariant)
		}
	}
}
