package guard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// Invalidate drops key's value on every node and any refresh in flight.
// A failure is returned, and retried in the background; this node drops
// its own copies at once, and a load of key that began before Invalidate
// is not kept to serve while Redis is down.
func (g *Group) Invalidate(ctx context.Context, key string) error {
	if err := g.check(ctx, key, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		return err
	}
	g.loc.Remove(key)
	g.reserve.Forget(key)
	g.hints.c.Remove(key)
	g.over.c.Remove(key)
	nm := g.names(key)
	if err := g.invalidate(ctx, nm); err != nil {
		g.retryLater(invTarget{name: key})
		return err
	}
	return nil
}

func (g *Group) invalidate(ctx context.Context, nm names) error {
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	// Whatever the outcome (a timeout may have run the script), a GET sent
	// before it returns may carry the value it dropped: none is kept.
	defer g.loc.Changed(nm.entry)
	v, err := lua.GuardInvalidate.Run(rctx, g.rdb, nm.keys[:5], g.keepArg, nm.entry).Slice()
	if err != nil {
		g.redisFailed("invalidate", err)
		return fmt.Errorf("guard: invalidate: %w", err)
	}
	g.br.Success()
	if len(v) == 2 {
		g.foreign(nm, v[1])
	}
	return nil
}

// InvalidateTag invalidates every key holding the hash tag tag ("{tag}..."
// or "...{tag}..."), as Invalidate does: at once, however many keys the
// tag has; their names are then dropped in bounded steps. The HTTP
// middleware tags a URL so.
func (g *Group) InvalidateTag(ctx context.Context, tag string) error {
	switch {
	case tag == "" || strings.Contains(tag, "}"):
		return fmt.Errorf("guard: invalid hash tag %q (not empty, no '}')", tag)
	case len(tag) > MaxKeyBytes:
		return fmt.Errorf("guard: tag of %d bytes exceeds MaxKeyBytes (%d)", len(tag), MaxKeyBytes)
	}
	if err := g.check(ctx, "{"+tag+"}", noLoad); err != nil {
		return err
	}
	if err := g.invalidateTag(ctx, tag, false); err != nil {
		g.retryLater(invTarget{tag: true, name: tag})
		return err
	}
	return nil
}

// invalidateTag is InvalidateTag past its checks: one attempt. Its first
// script writes the tag's invalidation time, which is in effect at once for
// every key of the tag, old or new, and moves the member set aside; the
// members are then dropped (and their waiters woken) in slices of
// drainSlice, each a short script, so no call blocks Redis for long and
// nothing another client does can keep it from ending.
func (g *Group) invalidateTag(ctx context.Context, tag string, retry bool) error {
	g.dropLocalTag(tag, !retry)
	// Again once the script ran (or may have): a read sent before may
	// carry a value it dropped.
	defer g.dropLocalTag(tag, !retry)
	members, inv := g.tagNames(tag)
	base := strings.TrimSuffix(members, ":tkeys")
	drain := base + ":tdrain:" + strconv.FormatUint(rand.Uint64(), 36)
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	v, err := lua.GuardInvalidateTag.Run(rctx, g.rdb, []string{members, inv, drain}, drainSlice, g.tagLifeArg).Slice()
	cancel()
	if err != nil {
		g.redisFailed("invalidate", err)
		return fmt.Errorf("guard: invalidate tag: %w", err)
	}
	g.br.Success()
	left, next := g.drained(tag, v)
	var at any
	if len(v) == 4 {
		at = v[3]
	}
	// In effect from here on: the slices only free memory and wake
	// waiters sooner. One that fails is reported; what it left expires
	// with the set, and reads drop it meanwhile.
	for steps := left/drainSlice + 2; left > 0 && len(next) > 0 && steps > 0; steps-- {
		keys, strangers := g.drainKeys(tag, drain, next)
		if len(strangers) > 0 {
			g.foreign(names{user: "{" + tag + "}"}, "tkeys")
		}
		rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
		v, err := lua.GuardDrainTag.Run(rctx, g.rdb, keys, append([]any{drainSlice, at}, strangers...)...).Slice()
		cancel()
		if err != nil {
			g.redisFailed("invalidate", fmt.Errorf("guard: invalidate tag: dropping its keys: %w", err))
			return nil
		}
		left, next = g.drained(tag, v)
	}
	return nil
}

// drainSlice is how many members of a tag one script drops: about 1ms of
// Redis's time (docs/guard.md has the figures).
const drainSlice = 64

// drained reads a reply of the tag scripts: the members left, and the
// next slice of them; foreign data it reports.
func (g *Group) drained(tag string, v []any) (int64, []any) {
	if len(v) < 3 {
		return 0, nil
	}
	g.foreign(names{user: "{" + tag + "}"}, v[1])
	left, _ := v[0].(int64)
	next, _ := v[2].([]any)
	return left, next
}

// drainKeys are the keys of guard_invalidate_drain.lua for members ms of
// the set drain: the entry, lease, fence counter and waiters of each that
// is the entry name of a key of the tag, and the others apart: a member
// another writer added may name any key (the user's, another slot's, or
// another name of a key of the tag: its lease, its counter) and is only
// removed from the set.
func (g *Group) drainKeys(tag, drain string, ms []any) ([]string, []any) {
	keys := make([]string, 0, 1+4*len(ms))
	keys = append(keys, drain)
	var strangers []any
	for _, m := range ms {
		e, _ := m.(string)
		key, role, ok := g.KeyOf(e)
		if t, tagged := hashtag.Tag(key); ok && role == roleEntry && tagged && t == tag {
			keys = append(keys, e, e+":lease", e+":fence", e+":w")
		} else {
			strangers = append(strangers, e)
		}
	}
	return keys, strangers
}

// dropLocalTag drops this process's local copies of the keys of tag, and,
// with reserve set, what its reserve holds of them (not for a retry of a
// failed invalidation: the first try dropped them, and what the reserve
// kept since was loaded after, and a retry each second would refuse every
// load of the tag's keys longer than that, while Redis is down).
// (The fast path's hints need no dropping: its GET of a tagged key reads
// the tag's invalidation time too.)
func (g *Group) dropLocalTag(tag string, reserve bool) {
	g.loc.ChangedTag(hashtag.Base(g.opts.Namespace, tag))
	if reserve {
		g.reserve.ForgetTag(tag)
	}
}
