package guard

import (
	"context"
	"errors"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestNamesShareOneTag(t *testing.T) {
	g := &Group{opts: Options{Namespace: "ns:"}}
	nm := g.names("a}b")
	want := []string{"ns:{a%7Db}", "ns:{a%7Db}:lease", "ns:{a%7Db}:fence", "ns:{a%7Db}:w", "ns:{a%7Db}:inv"}
	for i, w := range want {
		if nm.keys[i] != w {
			t.Fatalf("names %q, want %q", nm.keys, want)
		}
	}
	if nm.entry != want[0] {
		t.Fatalf("entry %q", nm.entry)
	}
}

// TestTaggedKeysShareTheirTagsSlot: a key that holds a hash tag is named in
// the tag's slot, next to the other keys of the tag.
func TestTaggedKeysShareTheirTagsSlot(t *testing.T) {
	g := &Group{opts: Options{Namespace: "ns:"}}
	nm := g.names("{user:42}:profile")
	want := "ns:{user:42}/17:{user:42}:profile"
	if nm.entry != want || nm.keys[1] != want+":lease" {
		t.Fatalf("names %q, want %q and its suffixes", nm.keys, want)
	}
}

// TestTaggedKeysOnCluster: on a real cluster, keys of one tag are served,
// batched and invalidated, and every name of theirs is in the tag's slot.
func TestTaggedKeysOnCluster(t *testing.T) {
	rdb := redistest.SharedCluster(t).Client(t)
	g := newGroup(t, rdb, Options{Namespace: redistest.Key(t) + ":"})
	keys := []string{"{user:42}:profile", "{user:42}:friends", "{user:43}:profile", "plain"}
	want, err := rdb.ClusterKeySlot(ctxT(t), "user:42").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys[:2] {
		for _, name := range g.names(key).keys {
			if got, err := rdb.ClusterKeySlot(ctxT(t), name).Result(); err != nil || got != want {
				t.Fatalf("%q: slot %d (%v), want the tag's %d", name, got, err, want)
			}
		}
	}
	for _, key := range keys {
		if v, err := g.Get(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte(key), nil }); err != nil || string(v) != key {
			t.Fatalf("%q: %q, %v", key, v, err)
		}
	}
	got, err := g.GetMany(ctxT(t), keys, func(_ context.Context, ks []string) (map[string][]byte, error) {
		return nil, errors.New("all stored: the loader must not run")
	})
	if err != nil || len(got) != len(keys) {
		t.Fatalf("GetMany: %d values, %v", len(got), err)
	}
	if err := g.Invalidate(ctxT(t), keys[0]); err != nil {
		t.Fatal(err)
	}
	if v, err := g.Get(ctxT(t), keys[0], func(context.Context) ([]byte, error) { return []byte("again"), nil }); err != nil || string(v) != "again" {
		t.Fatalf("after Invalidate: %q, %v", v, err)
	}
}
