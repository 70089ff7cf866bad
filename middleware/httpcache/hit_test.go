package httpcache

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// sameDecoding reports how got differs from what decodeResponse makes of
// val, or "".
func sameDecoding(got storedResponse, val []byte) string {
	want, err := decodeResponse(val)
	switch {
	case err != nil:
		return "decodes, want " + err.Error()
	case got.status != want.status || got.initialAge != want.initialAge || got.headLen != want.headLen:
		return "another status, age or head length"
	case !bytes.Equal(got.body, want.body) || &got.body[:1][0] != &val[want.headLen:][:1][0]:
		return "another body, or a copy of it"
	case !slices.Equal(got.contentLength, want.contentLength):
		return "another Content-Length"
	case !slices.EqualFunc(got.fields, want.fields, func(a, b storedField) bool {
		return a.name == b.name && slices.Equal(a.vals, b.vals)
	}):
		return "other fields"
	}
	return ""
}

// TestDecodedMemo: a key's stored response is decoded as decodeResponse
// decodes it, whether the memo holds its head or not: the same entry
// again, a new body under the same head, a new head, garbage after a good
// entry, and another key with the same entry.
func TestDecodedMemo(t *testing.T) {
	e := memoEngine(Config[*http.Request]{})
	h := http.Header{"Content-Type": {"text/plain"}, "Etag": {`"a"`}, "X-Multi": {"1", "2"}}
	v1 := encodeResponse(200, 3, h, []byte("body one"))
	v2 := encodeResponse(200, 3, h, []byte("body two"))
	h3 := h.Clone()
	h3.Set("Etag", `"b"`)
	v3 := encodeResponse(200, 3, h3, []byte("body two"))
	longer := append(slices.Clip(v1), 'x')
	shorter := v1[:len(v1)-1]
	steps := []struct {
		name, key string
		val       []byte
		bad       bool
	}{
		{"first", "k", v1, false},
		{"again", "k", v1, false},
		{"a copy", "k", bytes.Clone(v1), false},
		{"new body, same head", "k", v2, false},
		{"new head", "k", v3, false},
		{"back", "k", v1, false},
		{"a byte more", "k", longer, true},
		{"a byte less", "k", shorter, true},
		{"after garbage", "k", v1, false},
		{"another key", "j", v1, false},
		{"the first key", "k", v3, false},
	}
	for _, s := range steps {
		sr, err := e.decoded(s.key, s.val)
		if s.bad {
			if err == nil {
				t.Errorf("%s: decoded, want an error", s.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if why := sameDecoding(sr, s.val); why != "" {
			t.Errorf("%s: %s", s.name, why)
		}
	}
}

// TestHitFieldsStayPut: a handler or middleware that adds to the fields of
// a hit's header, as http.Header's methods do, changes that response only,
// not the next hit's.
func TestHitFieldsStayPut(t *testing.T) {
	e := memoEngine(Config[*http.Request]{})
	val := encodeResponse(200, 0, http.Header{"Content-Type": {"text/plain"}, "Vary": {"Accept"}}, []byte("hello"))
	r := httptest.NewRequest(http.MethodGet, "/a", nil)
	res := guard.Result{Value: val, Status: guard.Hit, Age: 2 * time.Second}
	hit := func() http.Header {
		sr, err := e.decoded("k", val)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		e.write(rec, r, &sr, res, cachestatus.Hit)
		return rec.Header()
	}
	first := hit().Clone()
	h := hit()
	for _, name := range []string{"Content-Type", "Vary", "Age", "Cache-Status", "Content-Length"} {
		h.Add(name, "added")
		h[name] = append(h[name], "appended")
	}
	if got := hit(); !equalHeaders(got, first) {
		t.Fatalf("after another hit's header was added to: %v, want %v", got, first)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestHitAge: the Age of a hit follows the time stored, second by second,
// in turn and at once.
func TestHitAge(t *testing.T) {
	e := memoEngine(Config[*http.Request]{})
	val := encodeResponse(200, 5, http.Header{"Content-Type": {"text/plain"}}, []byte("hello"))
	r := httptest.NewRequest(http.MethodGet, "/a", nil)
	age := func(stored time.Duration) string {
		sr, err := e.decoded("k", val)
		if err != nil {
			t.Error(err)
			return ""
		}
		rec := httptest.NewRecorder()
		e.write(rec, r, &sr, guard.Result{Value: val, Status: guard.Hit, Age: stored}, cachestatus.Hit)
		return rec.Header().Get("Age")
	}
	for _, c := range []struct {
		stored time.Duration
		want   string
	}{{0, "5"}, {999 * time.Millisecond, "5"}, {time.Second, "6"}, {time.Second, "6"}, {100 * time.Second, "105"}, {2 * time.Second, "7"}} {
		if got := age(c.stored); got != c.want {
			t.Errorf("stored %v: Age %q, want %q", c.stored, got, c.want)
		}
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				n := (i + j) % 3
				if got, want := age(time.Duration(n)*time.Second), []string{"5", "6", "7"}[n]; got != want {
					t.Errorf("at once: Age %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// discardWriter keeps the header only.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestHitAllocs: what the engine does for a hit (the request's key, the
// stored response decoded, its fields written) allocates nothing once the
// URL was served before: the key, the decoding and the Age of this second
// are the memo's.
func TestHitAllocs(t *testing.T) {
	e := memoEngine(Config[*http.Request]{KeyHeaders: []string{"Accept-Language"}})
	r := request("shop.example", "/products/42?sort=price&page=2", false, "fr")
	r.Header.Set("X-Forwarded-Proto", "https")
	h := http.Header{"Content-Type": {"text/html"}, "Cache-Control": {"max-age=60"}, "Etag": {`"v1"`}, "Date": {"Sat, 28 Nov 2026 04:00:00 GMT"}}
	val := encodeResponse(200, 0, h, []byte(strings.Repeat("x", 1024)))
	res := guard.Result{Value: val, Status: guard.Hit, Age: 3 * time.Second}
	w := &discardWriter{h: http.Header{}}
	hit := func() {
		clear(w.h)
		sr, err := e.decoded(e.derived(r), res.Value)
		if err != nil {
			t.Fatal(err)
		}
		e.write(w, r, &sr, res, cachestatus.Hit)
	}
	hit()
	if got := testing.AllocsPerRun(100, hit); got != 0 {
		t.Errorf("%v allocations per hit, want 0", got)
	}
	if got := w.h.Get("Age"); got != "3" {
		t.Errorf("Age %q, want 3", got)
	}
}
