package httpcache

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestEngineKey: Key is the key a served GET is stored under, with
// KeyHost and KeyHeaders applied, https when r.TLS is set; "" for a
// request never shared; its tag is the URL's, which an unsafe request
// invalidates.
func TestEngineKey(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g, err := guard.New(rdb, guard.Options{Namespace: "enginekey:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	ctx := context.Background()
	eng, err := New(g, Config[*http.Request]{KeyHost: "shop.example", KeyHeaders: []string{"Accept-Language"}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(w http.ResponseWriter, r *http.Request) error { _, err := w.Write([]byte("page")); return err }
	const path = "/products/8?b=2&a=1"
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Host = "10.0.0.7:8080"
	r.Header.Set("Accept-Language", "fr")
	if err := eng.Serve(r, httptest.NewRecorder(), r, nil, run); err != nil {
		t.Fatal(err)
	}
	key := eng.Key(r)
	ki, err := g.Inspect(ctx, key)
	if err != nil || ki.State != "fresh" || ki.Size == 0 {
		t.Fatalf("Inspect(Key(r)) = %+v, %v; want the response served, fresh", ki, err)
	}
	want := urlTag(false, "shop.example", r.URL)
	if ki.Tag != want {
		t.Errorf("Tag = %q, want the URL's %q", ki.Tag, want)
	}

	// Another Host (KeyHost rules), the query in another order: the same
	// key. Another Accept-Language, https: other keys of the same URL,
	// save https.
	same := httptest.NewRequest(http.MethodGet, "/products/8?a=1&b=2", nil)
	same.Header.Set("Accept-Language", "fr")
	if got := eng.Key(same); got != key {
		t.Errorf("Key with the query reordered = %q, want %q", got, key)
	}
	other := same.Clone(ctx)
	other.Header.Set("Accept-Language", "de")
	if got := eng.Key(other); got == key || got[:tagLen+2] != key[:tagLen+2] {
		t.Errorf("Key of another variant = %q: want another key with the tag of %q", got, key)
	}
	secure := same.Clone(ctx)
	secure.TLS = &tls.ConnectionState{}
	if got := eng.Key(secure); got == key {
		t.Error("Key over https is the http one")
	}
	for _, h := range []string{"Authorization", "Cookie"} {
		private := same.Clone(ctx)
		private.Header.Set(h, "x")
		if got := eng.Key(private); got != "" {
			t.Errorf("Key with %s = %q, want \"\" (never shared)", h, got)
		}
	}

	// An unsafe request of the URL drops it.
	put := httptest.NewRequest(http.MethodPut, path, nil)
	eng.Unsafe(put)(http.StatusNoContent, http.Header{})
	if ki, err := g.Inspect(ctx, key); err != nil || ki.State != "missing" {
		t.Errorf("after a PUT, Inspect = %q, %v; want missing", ki.State, err)
	}
}
