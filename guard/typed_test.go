package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

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
	if e, derr := entry.Decode(raw); err != nil || derr != nil || string(e.Value) != "plain" {
		t.Fatalf("string stored as %q (%v, %v), want it as is", e.Value, err, derr)
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

// TestTypedBytesOwned: Fetch[[]byte] and Wrap hand each caller a slice of
// its own: an edit by one caller is never served to the next, whether the
// value comes from a flight, from Redis or from the in-process tier.
func TestTypedBytesOwned(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	g := newGroup(t, rdb, Options{LocalEntries: 16})
	key := redistest.Key(t)
	loaded := []byte("original")
	load := func(context.Context) ([]byte, error) { return loaded, nil }
	for i := range 4 { // a miss, a Redis hit, local hits
		b, err := Fetch(ctxT(t), g, key, load)
		if err != nil || string(b) != "original" {
			t.Fatalf("Fetch %d = %q, %v; want original (an earlier caller's edit leaked)", i, b, err)
		}
		b[0] = 'X'
	}
	if string(loaded) != "original" {
		t.Fatalf("a caller's edit reached the loader's own slice: %q", loaded)
	}
	f := Wrap(g, func(k string) string { return k }, func(context.Context, string) ([]byte, error) { return []byte("wrapped"), nil })
	wkey := redistest.Key(t, "wrap")
	for i := range 4 {
		b, err := f(ctxT(t), wkey)
		if err != nil || string(b) != "wrapped" {
			t.Fatalf("Wrap call %d = %q, %v; want wrapped", i, b, err)
		}
		b[0] = 'X'
	}
	// FetchMany: ids that share a key get slices of their own.
	mkey := redistest.Key(t, "many")
	for range 2 { // a miss, then a hit
		got, err := FetchMany(ctxT(t), g, []int{1, 2}, func(int) string { return mkey }, func(_ context.Context, ids []int) (map[int][]byte, error) {
			return map[int][]byte{ids[0]: []byte("many")}, nil
		})
		if err != nil || string(got[1]) != "many" || string(got[2]) != "many" || &got[1][0] == &got[2][0] {
			t.Fatalf("FetchMany = %q %q, %v; want two copies of many", got[1], got[2], err)
		}
		got[1][0] = 'X'
	}
	// Callers of one flight get slices of their own too.
	fkey := redistest.Key(t, "flight")
	gate := make(chan struct{})
	var wg sync.WaitGroup
	res := make([][]byte, 8)
	for i := range res {
		wg.Go(func() {
			res[i], _ = Fetch(ctxT(t), g, fkey, func(context.Context) ([]byte, error) {
				<-gate
				return []byte("shared"), nil
			})
		})
	}
	redistest.Eventually(t, 10*time.Second, "the callers in one flight", func() bool {
		g.fmu.Lock()
		defer g.fmu.Unlock()
		f := g.flights[fkey]
		return f != nil && f.callers == len(res)
	})
	close(gate)
	wg.Wait()
	for i := range res {
		for j := range i {
			if len(res[i]) > 0 && len(res[j]) > 0 && &res[i][0] == &res[j][0] {
				t.Fatalf("callers %d and %d of one flight share a slice", i, j)
			}
		}
	}
}

// TestFetchRoundTrip: what Fetch and FetchMany return, to the caller
// whose load ran and to a later caller served from Redis, is the loaded
// value as encoding/json (or, for a T of []byte or string, nothing) turns
// it into a T, whatever the dynamic type an interface T holds: a string
// held by an any comes back a string, not the number its text reads as,
// and a []byte held by one does not make every later call fail.
func TestFetchRoundTrip(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{})
	for i, v := range []any{"42", []byte("hello"), "not json", 7, 2.5, true, nil, map[string]any{"a": "1"}, []any{"x", 1.0}} {
		key := fmt.Sprint("any-", i)
		var want any
		b, _ := json.Marshal(v)
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		for call := range 2 {
			got, err := Fetch(ctxT(t), g, key, func(context.Context) (any, error) { return v, nil })
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("Fetch[any] of %#v, call %d: %#v (%T), %v; want %#v (%T)", v, call+1, got, got, err, want, want)
			}
		}
		ids := []string{key + "-m"}
		for call := range 2 {
			m, err := FetchMany(ctxT(t), g, ids, func(id string) string { return id },
				func(context.Context, []string) (map[string]any, error) { return map[string]any{ids[0]: v}, nil })
			if err != nil || !reflect.DeepEqual(m[ids[0]], want) {
				t.Fatalf("FetchMany[any] of %#v, call %d: %#v, %v; want %#v", v, call+1, m[ids[0]], err, want)
			}
		}
	}
	for call := range 2 {
		if s, err := Fetch(ctxT(t), g, "str", func(context.Context) (string, error) { return "42", nil }); err != nil || s != "42" {
			t.Fatalf("Fetch[string], call %d: %q %v", call+1, s, err)
		}
		if b, err := Fetch(ctxT(t), g, "bytes", func(context.Context) ([]byte, error) { return []byte("hello"), nil }); err != nil || string(b) != "hello" {
			t.Fatalf("Fetch[[]byte], call %d: %q %v", call+1, b, err)
		}
	}
}
