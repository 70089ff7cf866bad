package httpcache

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// TestVariantKey: the values of the selecting headers pick the variant,
// normalised as RFC 9111 §4.1 allows and no further; every variant of a URL
// carries the URL key's hash tag.
func TestVariantKey(t *testing.T) {
	rec := varyRecord{gen: "g1", names: []string{"Accept-Encoding", "X-Mode"}}
	key := func(h map[string][]string) string {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for k, v := range h {
			r.Header[k] = v
		}
		return variantKey("h2:abc", rec, r)
	}
	same := [][2]map[string][]string{
		{{"Accept-Encoding": {"gzip, br"}}, {"Accept-Encoding": {"GZIP,br"}}},
		{{"Accept-Encoding": {"gzip", "br"}}, {"Accept-Encoding": {"gzip, br"}}},
		{{"Accept-Encoding": {" gzip ,\tbr "}}, {"Accept-Encoding": {"gzip,br"}}},
		{{"X-Mode": {"a", "b"}}, {"X-Mode": {"a, b"}}},
	}
	for _, p := range same {
		if a, b := key(p[0]), key(p[1]); a != b {
			t.Errorf("%v and %v select different variants", p[0], p[1])
		}
	}
	differ := [][2]map[string][]string{
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
