package httpcache

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// TestVariantKey: the values of the selecting headers pick the variant,
// exactly, field line by field line (a spelling the handler may read
// otherwise is a variant of its own); Host is r.Host; every variant of a
// URL carries the URL key's hash tag.
func TestVariantKey(t *testing.T) {
	rec := varyRecord{gen: "g1", names: []string{"Accept-Encoding", "X-Mode"}}
	key := func(h map[string][]string) string {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for k, v := range h {
			r.Header[k] = v
		}
		return variantKey("h2:abc", rec, r)
	}
	if a, b := key(map[string][]string{"Accept-Encoding": {"gzip, br"}, "X-Mode": {"a"}}), key(map[string][]string{"X-Mode": {"a"}, "Accept-Encoding": {"gzip, br"}}); a != b {
		t.Error("the same request selects two variants")
	}
	differ := [][2]map[string][]string{
		{{"Accept-Encoding": {"gzip, br"}}, {"Accept-Encoding": {"GZIP,br"}}},
		{{"Accept-Encoding": {"gzip", "br"}}, {"Accept-Encoding": {"gzip, br"}}},
		{{"Accept-Encoding": {" gzip ,\tbr "}}, {"Accept-Encoding": {"gzip,br"}}},
		{{"X-Mode": {"a", "b"}}, {"X-Mode": {"a, b"}}},
		{{"X-Mode": {"a", "b"}}, {"X-Mode": {"a"}}},
		{{"Accept-Encoding": {"gzip, br"}}, {"Accept-Encoding": {"br, gzip"}}},
		{{}, {"X-Mode": {""}}},
		{{"X-Mode": {"A"}}, {"X-Mode": {"a"}}},
		{{"X-Mode": {"a,b"}}, {"X-Mode": {"a, b"}}},
		{{"Accept-Encoding": {"gzip"}}, {"X-Mode": {"gzip"}}},
	}
	for _, p := range differ {
		if a, b := key(p[0]), key(p[1]); a == b {
			t.Errorf("%v and %v select the same variant", p[0], p[1])
		}
	}
	if k := key(nil); hashtag.KeyBase("ns:", k)[:len("ns:{h2:abc}")] != hashtag.KeyBase("ns:", "h2:abc") {
		t.Errorf("variant key %q is not named in the URL key's slot: %q", k, hashtag.KeyBase("ns:", k))
	}
	byHost := varyRecord{gen: "g1", names: []string{"Host"}}
	ra, rb := httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRequest(http.MethodGet, "/", nil)
	ra.Host, rb.Host = "a.example", "b.example"
	if variantKey("h2:abc", byHost, ra) == variantKey("h2:abc", byHost, rb) {
		t.Error("Vary: Host: two hosts select the same variant")
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if a, b := variantKey("h2:abc", rec, r), variantKey("h2:abc", varyRecord{gen: "g2", names: rec.names}, r); a == b {
		t.Error("a new generation selects the old variant")
	}
	if k := variantKey("hu:{user}x", rec, r); hashTag(k) != "user" {
		t.Errorf("variant of a tagged key %q has tag %q", k, hashTag(k))
	}
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{"abc": "abc", "{a}b": "a", "x{a}{b}": "a", "{}a": "{}a", "a{b": "a{b", "a}{b}": "b"} {
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

// FuzzDecodeRecord: a record decodes, or is garbage; never a panic, and a
// decoded record encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(varyRecord{gen: "g", names: []string{"Accept", "X-A"}}))
	f.Add([]byte("shv\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			return
		}
		if got := encodeRecord(rec); string(got) != string(b) {
			t.Fatalf("re-encoded %q, want %q", got, b)
		}
	})
}
