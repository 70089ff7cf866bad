package guard

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestInvalidateTag: InvalidateTag on one node drops every key of the tag
// that any node filled, and no other key.
func TestInvalidateTag(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		base := redistest.Key(t)
		tag := strings.ReplaceAll(base, "{", "(")
		tagged := []string{"{" + tag + "}:a", "{" + tag + "}:b", "x{" + tag + "}y"}
		others := []string{"{" + tag + "-other}:a", tag + ":untagged"}
		a, b := newGroup(t, rdb, Options{}), newGroup(t, rdb, Options{})
		var loads atomic.Int64
		load := func(v string) LoadFunc {
			return func(context.Context) ([]byte, error) { loads.Add(1); return []byte(v), nil }
		}
		for _, k := range append(tagged, others...) {
			if _, err := a.Do(ctxT(t), k, load(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.InvalidateTag(ctxT(t), tag); err != nil {
			t.Fatal(err)
		}
		for _, k := range tagged {
			res, err := a.Do(ctxT(t), k, load(k+" again"))
			if err != nil || res.Status != Miss || string(res.Value) != k+" again" {
				t.Errorf("%s after InvalidateTag: %v %q %v, want a miss", k, res.Status, res.Value, err)
			}
		}
		for _, k := range others {
			res, err := a.Do(ctxT(t), k, nil2Loader(t))
			if err != nil || res.Status != Hit {
				t.Errorf("%s (not of the tag) after InvalidateTag: %v %v, want a hit", k, res.Status, err)
			}
		}
		if err := b.InvalidateTag(ctxT(t), "a}b"); err == nil {
			t.Error("a tag holding '}' accepted")
		}
	})
}

// TestInvalidateTagFencesLoadsInFlight: a load of a key of the tag that
// took its lease before InvalidateTag stores nothing, even for a key never
// stored before (so not a member of the tag yet).
func TestInvalidateTagFencesLoadsInFlight(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		tag := strings.ReplaceAll(redistest.Key(t), "{", "(")
		key := "{" + tag + "}:new"
		var rejected atomic.Int64
		g := newGroup(t, rdb, Options{Hooks: Hooks{FillRejected: func(string) { rejected.Add(1) }}})
		other := newGroup(t, rdb, Options{})
		res, err := g.Do(ctxT(t), key, func(ctx context.Context) ([]byte, error) {
			if err := other.InvalidateTag(ctx, tag); err != nil {
				return nil, err
			}
			return []byte("loaded before the invalidation"), nil
		})
		if err != nil || string(res.Value) != "loaded before the invalidation" {
			t.Fatalf("%v %q", err, res.Value)
		}
		if rejected.Load() != 1 {
			t.Errorf("FillRejected %d times, want 1", rejected.Load())
		}
		if n, err := rdb.Exists(ctxT(t), g.names(key).entry).Result(); err != nil || n != 0 {
			t.Errorf("stored after the invalidation (exists %d, %v)", n, err)
		}
	})
}
