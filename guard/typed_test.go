package guard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestFetchAndWrap: typed values round-trip through Redis as JSON, and []byte
// and string as they are.
func TestFetchAndWrap(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{})
	type user struct {
		ID   int
		Name string
	}
	var loads atomic.Int64
	getUser := Wrap(g, func(id int) string { return "user:" + strconv.Itoa(id) },
		func(_ context.Context, id int) (user, error) {
			loads.Add(1)
			return user{ID: id, Name: "u" + strconv.Itoa(id)}, nil
		})
	for range 3 {
		u, err := getUser(ctxT(t), 7)
		if err != nil || u != (user{7, "u7"}) {
			t.Fatalf("got %+v, %v", u, err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("%d loads, want 1", loads.Load())
	}
	s, err := Fetch(ctxT(t), g, "s", func(context.Context) (string, error) { return "plain", nil })
	if err != nil || s != "plain" {
		t.Fatalf("%q %v", s, err)
	}
	raw, err := rdb.Get(ctxT(t), g.names("s").entry).Bytes()
	if e, derr := decodeEntry(raw); err != nil || derr != nil || string(e.value) != "plain" {
		t.Fatalf("string stored as %q (%v, %v), want it as is", e.value, err, derr)
	}
	if _, err := Fetch(ctxT(t), g, "bad", func(context.Context) (func(), error) { return func() {}, nil }); err == nil {
		t.Fatal("a value JSON cannot encode was accepted")
	}
}

// TestWrapPanicsOnNil: Wrap is where a guarded func is built, so a nil
// Group, key func or loader is refused there, as a programming error, and
// not on every call.
func TestWrapPanicsOnNil(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{})
	key := func(s string) string { return s }
	load := func(context.Context, string) (string, error) { return "", nil }
	for _, c := range []struct {
		name, want string
		build      func()
	}{
		{"nil Group", "guard: Wrap with a nil Group", func() { Wrap(nil, key, load) }},
		{"nil key func", "guard: Wrap with a nil key func", func() { Wrap(g, nil, load) }},
		{"nil load func", "guard: Wrap with a nil load func", func() { Wrap[string, string](g, key, nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if p := recover(); fmt.Sprint(p) != c.want {
					t.Fatalf("Wrap panicked with %v, want %q", p, c.want)
				}
			}()
			c.build()
		})
	}
}

// TestFetchUnencodableStoresNothing: a value JSON cannot encode is the
// caller's bug, not an origin failure: the caller gets the encoding error,
// no entry and no error marker is stored (another node loads normally, it is
// not told to back off), and the lease is released at once.
func TestFetchUnencodableStoresNothing(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ns := rowNamespace()
	g := newGroup(t, rdb, Options{Namespace: ns, ErrorBackoff: time.Minute})
	other := newGroup(t, rdb, Options{Namespace: ns})
	_, err := Fetch(ctxT(t), g, "k", func(context.Context) (func(), error) { return func() {}, nil })
	if err == nil || !strings.Contains(err.Error(), "guard: encoding value") {
		t.Fatalf("got %v, want the encoding error", err)
	}
	// The read that won the lease minted a fence: that counter is all there
	// may be.
	nm := g.names("k")
	for _, k := range namespaceKeys(t, rdb, ns) {
		if k != nm.keys[2] {
			t.Fatalf("an unencodable value left %q in Redis", k)
		}
	}
	v, err := Fetch(ctxT(t), other, "k", func(context.Context) (string, error) { return "fine", nil })
	if err != nil || v != "fine" {
		t.Fatalf("another node after the failed Fetch: %q, %v; want it to load (no back-off)", v, err)
	}
}
