package guard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestInvalidateTagDrainForeign writes generated foreign members into a
// tag's member set, which InvalidateTag renames to ns{T}:tdrain:<id> and
// drains, and foreign values under other ns{T}:tdrain: names: members
// under the tag's own prefix that are not entry names (the lease, fence
// counter, waiters, invalidation marker and backup lease of a key of the
// tag that is no member, a name no key has, a malformed length, odd
// bytes, a megabyte) beside real members. Each round checks that
// InvalidateTag answers, drops the real members' entries, touches none
// of the names the foreign members spell nor the foreign drain names,
// leaves no drain set of its own, and reports the foreign members.
func TestInvalidateTagDrainForeign(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	var corrupt int
	ctx := ctxT(t)
	o := Options{Namespace: redistest.Key(t) + ":", Hooks: Hooks{Corrupt: func(string, error) { corrupt++ }}}
	g := newGroup(t, rdb, o)
	seed := uint64(time.Now().UnixNano())
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	t.Logf("seed %d (replay: -guard.seed=%d)", seed, seed)
	r := newRand(seed, 0)
	for round := range 12 {
		tag := "t" + strconv.Itoa(round)
		members, _ := g.tagNames(tag)
		base := strings.TrimSuffix(members, ":tkeys")
		// Real members: filled keys of the tag.
		var real []string
		for i := range 1 + r.IntN(3) {
			key := fmt.Sprintf("{%s}:k%d", tag, i)
			if _, err := g.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("v"), nil }); err != nil {
				t.Fatal(err)
			}
			real = append(real, key)
		}
		// Foreign members, each naming a value that must stay as it is.
		kept := genDrainMembers(r, g, tag, base)
		p := rdb.Pipeline()
		for name, v := range kept {
			p.Set(ctx, name, v, time.Hour)
			p.SAdd(ctx, members, name)
		}
		// Foreign values under other drain names.
		for i := range 2 {
			name := base + ":tdrain:" + strconv.Itoa(r.IntN(1000)) + "x" + strconv.Itoa(i)
			switch r.IntN(3) {
			case 0:
				p.HSet(ctx, name, "f", "v")
			case 1:
				p.SAdd(ctx, name, g.names(real[0]).entry, "garbage")
			default:
				p.Set(ctx, name, strings.Repeat("d", r.IntN(1<<20)), 0)
			}
			kept[name] = "" // any value: checked by existence
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		before := corrupt
		what := fmt.Sprintf("round %d (%d foreign names)", round, len(kept))
		if err := g.InvalidateTag(ctx, tag); err != nil {
			t.Fatalf("%s: InvalidateTag: %v", what, err)
		}
		for _, key := range real {
			if n := rdb.Exists(ctx, g.names(key).entry).Val(); n != 0 {
				t.Errorf("%s: %s still has its entry", what, key)
			}
		}
		for name, v := range kept {
			got, err := rdb.Get(ctx, name).Result()
			switch {
			case v == "":
				if rdb.Exists(ctx, name).Val() != 1 {
					t.Errorf("%s: %.60q, a foreign drain name, was deleted", what, name)
				}
			case err != nil || got != v:
				t.Errorf("%s: %.60q, named by a foreign member, is now %.20q (%v)", what, name, got, err)
			}
		}
		drains, err := rdb.Keys(ctx, base+":tdrain:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if left := slices.DeleteFunc(drains, func(n string) bool { _, ok := kept[n]; return ok }); len(left) > 0 {
			t.Errorf("%s: drain sets left: %q", what, left)
		}
		if corrupt == before {
			t.Errorf("%s: the foreign members were not reported", what)
		}
		for name := range kept {
			rdb.Del(ctx, name)
		}
	}
}

// genDrainMembers returns foreign members for tag's member set: names
// under the tag's prefix base that are not entry names of its keys, each
// with the value planted under it.
func genDrainMembers(r *rand.Rand, g *Group, tag, base string) map[string]string {
	by := g.names(fmt.Sprintf("{%s}:bystander%d", tag, r.IntN(1000))) // a key of the tag, no member
	kinds := []func() string{
		func() string { return by.keys[1] },       // its lease
		func() string { return by.keys[2] },       // its fence counter
		func() string { return by.keys[3] },       // its waiters
		func() string { return by.keys[4] },       // its invalidation marker
		func() string { return by.backupLease() }, // its backup lease
		func() string { return base + "/garbage" },
		func() string { return base + "/99:{" + tag + "}short" }, // a length past the end
		func() string { return base + "/007:{" + tag + "}x" },    // a length not canonical
		func() string { return base + "/" + string([]byte{0, 0xff, byte(r.IntN(256))}) },
		func() string { return base + "/" + strings.Repeat("m", 1<<20) },
	}
	out := map[string]string{}
	for _, i := range r.Perm(len(kinds))[:1+r.IntN(len(kinds))] {
		out[kinds[i]()] = "user data " + strconv.Itoa(i)
	}
	return out
}
