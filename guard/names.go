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
	keys  []string // entry, lease, fence, waiters, inv
}

func (g *Group) names(key string) names {
	b := hashtag.KeyBase(g.opts.Namespace, key)
	// One allocation for the five names: substrings of one string.
	all := b + b + ":lease" + b + ":fence" + b + ":w" + b + ":inv"
	n := len(b)
	lease, fence, w := n+n+6, n+n+6+n+6, n+n+6+n+6+n+2
	return names{user: key, entry: all[:n], keys: []string{all[:n], all[n:lease], all[lease:fence], all[fence:w], all[w:]}}
}

// ms is scriptarg.Millis, short for the many script arguments of this package.
func ms(d time.Duration) int64 { return scriptarg.Millis(d) }
