package guard

import (
	"time"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/scriptarg"
)

// names are the Redis names of one key; they share one hash tag.
type names struct {
	user  string // the caller's key
	entry string
	// keys: entry, lease, fence, waiters, inv; for a key that holds a
	// hash tag of its own, then the tag's names (tagNames).
	keys []string
}

func (g *Group) names(key string) names {
	b := hashtag.KeyBase(g.opts.Namespace, key)
	// One allocation for the five names: substrings of one string.
	all := b + b + ":lease" + b + ":fence" + b + ":w" + b + ":inv"
	n := len(b)
	lease, fence, w := n+n+6, n+n+6+n+6, n+n+6+n+6+n+2
	keys := []string{all[:n], all[n:lease], all[lease:fence], all[fence:w], all[w:]}
	if tag, ok := hashtag.Tag(key); ok {
		tk, ti := g.tagNames(tag)
		keys = append(keys, tk, ti)
	}
	return names{user: key, entry: all[:n], keys: keys}
}

// readKeys are the names the read script takes: entry, lease, fence and
// waiters; for a key with a hash tag of its own, all seven (the script
// reads the tag's invalidation key, the seventh).
func (nm names) readKeys() []string {
	if len(nm.keys) == 7 {
		return nm.keys
	}
	return nm.keys[:4]
}

// tagInv is the name of the tag's invalidation key for a key with a hash
// tag of its own, else "".
func (nm names) tagInv() string {
	if len(nm.keys) == 7 {
		return nm.keys[6]
	}
	return ""
}

// tagNames are the names of hash tag tag (see InvalidateTag): the set of
// the entries of its keys that were filled, and the Redis time (µs) of its
// last invalidation. They hash to the tag's slot, and no key's names end
// so (a tagged key's names continue with "/" after the tag).
func (g *Group) tagNames(tag string) (members, inv string) {
	b := hashtag.Base(g.opts.Namespace, tag)
	return b + ":tkeys", b + ":tinv"
}

// ms is scriptarg.Millis, short for the many script arguments of this package.
func ms(d time.Duration) int64 { return scriptarg.Millis(d) }

// outliveLease are the names guard_lease.lua takes to renew the key's
// lease: the lease, then what must outlive it (the fence counter the
// lease was minted from; the tag's member set, whose life an
// InvalidateTag gives its fence).
func (nm names) outliveLease() []string {
	if len(nm.keys) == 7 {
		return []string{nm.keys[1], nm.keys[2], nm.keys[5]}
	}
	return nm.keys[1:3]
}
