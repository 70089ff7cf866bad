package guard

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// A Group's view of one window, as published: JSON, its keys cut to
// maxHotKeyBytes so that a view stays a few KiB whatever the keys.
type hotView struct {
	V      int         `json:"v"`
	Node   string      `json:"node"`
	Window int64       `json:"window_ms"`
	Calls  []hotViewKV `json:"calls"`
	Loads  []hotViewKV `json:"loads"`
}

type hotViewKV struct {
	Key  string  `json:"key"`
	Rate float64 `json:"per_second"`
}

const (
	hotViewVersion = 1
	maxHotKeyBytes = 200
)

func encodeHot(node string, hk HotKeys, w time.Duration) ([]byte, error) {
	v := hotView{V: hotViewVersion, Node: node, Window: w.Milliseconds(),
		Calls: viewKVs(hk.Calls), Loads: viewKVs(hk.Loads)}
	return json.Marshal(v)
}

func viewKVs(ks []HotKey) []hotViewKV {
	out := make([]hotViewKV, len(ks))
	for i, k := range ks {
		out[i] = hotViewKV{Key: shortKey(k.Key), Rate: k.PerSecond}
	}
	return out
}

// shortKey is key when it is short, else its first bytes (whole UTF-8
// characters), "…" and a digest, so that long keys stay apart.
func shortKey(key string) string {
	if len(key) <= maxHotKeyBytes {
		return key
	}
	cut := maxHotKeyBytes - 20
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(key))
	return key[:cut] + "…" + hex.EncodeToString(sum[:6])
}

// Bounds of FleetHotKeys, so that foreign data under the published
// names (an index of many members, huge views) costs a bounded read.
const (
	maxHotNodes = 1000 // the most recent publishers read
	// maxHotNodeName is above any publisher's name (host/pid/random): a
	// member of the index longer than that is no Group's.
	maxHotNodeName = 512
	// maxHotViewBytes is above any view a Group publishes: 2 × maxHotKeys
	// keys of at most maxHotKeyBytes, each byte escaped as "\ufffd" at worst.
	maxHotViewBytes = 4 << 20
	maxHotRead      = 32 << 20 // bytes of views read in all
	// maxHotRate is more calls per second than any Group makes: a sum of
	// maxHotNodes views stays finite.
	maxHotRate = 1e12
)

// FleetHotKeys merges the hot keys every Group of the Namespace published
// lately, reading Redis and writing nothing. A view no Group would have
// published (another type, no TTL, too large, malformed) is skipped and
// counted in Foreign; a value of another type under the index is an error
// until the next Group's publication replaces it.
func (g *Group) FleetHotKeys(ctx context.Context) (HotKeys, error) {
	index, prefix := hotNames(g.opts.Namespace)
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	// Publishers list themselves scored by when their view expires (their
	// clock): those of the last minute, the most recent first; a score
	// further ahead than a view lives is no publisher's.
	now := time.Now()
	nodes, err := g.rdb.ZRangeArgs(rctx, redis.ZRangeArgs{Key: index, ByScore: true, Rev: true,
		Start: now.Add(3*hotWindow + time.Minute).UnixMilli(), Stop: now.Add(-time.Minute).UnixMilli(),
		Count: maxHotNodes}).Result()
	switch {
	case wrongType(err):
		return HotKeys{}, fmt.Errorf("guard: hot keys: %s holds data the guard did not write (%w); "+
			"the Namespace's next publication replaces it", index, err)
	case err != nil && !errors.Is(err, redis.Nil):
		return HotKeys{}, fmt.Errorf("guard: hot keys: %w", err)
	case len(nodes) == 0:
		return HotKeys{}, nil
	}
	// A member no Group would list (longer than any node name) is not
	// sent back as a name: five of 20 MB each cost 300 MB.
	long := 0
	nodes = slices.DeleteFunc(nodes, func(n string) bool {
		if len(n) > maxHotNodeName {
			long++
			return true
		}
		return false
	})
	names, skipped, err := g.hotViews(rctx, prefix, nodes)
	skipped += long
	if err != nil {
		return HotKeys{}, fmt.Errorf("guard: hot keys: %w", err)
	}
	views, err := g.readHotViews(rctx, names)
	if err != nil {
		return HotKeys{}, fmt.Errorf("guard: hot keys: %w", err)
	}
	hk := HotKeys{Foreign: skipped}
	calls, loads := map[string]float64{}, map[string]float64{}
	for _, s := range views {
		var view hotView
		switch {
		case s == "":
			continue // expired since
		case json.Unmarshal([]byte(s), &view) != nil || !view.wellFormed():
			hk.Foreign++
			continue
		}
		hk.Nodes++
		for _, kv := range view.Calls {
			calls[shortKey(kv.Key)] += kv.Rate
		}
		for _, kv := range view.Loads {
			loads[shortKey(kv.Key)] += kv.Rate
		}
	}
	hk.Calls, hk.Loads = ranked(calls), ranked(loads)
	return hk, nil
}

// hotViews returns the names of the views of nodes worth reading: strings
// with a TTL (a Group's expires) of at most maxHotViewBytes, maxHotRead in
// all; and how many it skipped as no Group's.
func (g *Group) hotViews(ctx context.Context, prefix string, nodes []string) ([]string, int, error) {
	p := g.rdb.Pipeline()
	sizes, ttls := make([]*redis.IntCmd, len(nodes)), make([]*redis.DurationCmd, len(nodes))
	for i, n := range nodes {
		sizes[i], ttls[i] = p.StrLen(ctx, prefix+n), p.PTTL(ctx, prefix+n)
	}
	if _, err := p.Exec(ctx); err != nil && !wrongType(err) {
		return nil, 0, err
	}
	var names []string
	skipped, total := 0, int64(0)
	for i, n := range nodes {
		size, err := sizes[i].Result()
		ttl := ttls[i].Val()
		switch {
		case ttl == -2:
			// Expired: its publisher is gone.
		case err != nil || ttl < 0 || size > maxHotViewBytes || total+size > maxHotRead:
			skipped++
		default:
			total += size
			names = append(names, prefix+n)
		}
	}
	return names, skipped, nil
}

// readHotViews reads the views names, each at most maxHotViewBytes should
// one have grown since it was measured; "" for one gone or of another
// type.
func (g *Group) readHotViews(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	p := g.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(names))
	for i, n := range names {
		cmds[i] = p.GetRange(ctx, n, 0, maxHotViewBytes-1)
	}
	if _, err := p.Exec(ctx); err != nil && !wrongType(err) {
		return nil, err
	}
	out := make([]string, len(names))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// wellFormed reports whether v could be a Group's view: this version, no
// more keys than HotKeys allows, keys no longer than a published one (its
// invalid bytes each "\ufffd" once decoded), finite rates in range.
func (v *hotView) wellFormed() bool {
	if v.V != hotViewVersion || v.Window <= 0 || len(v.Calls) > maxHotKeys || len(v.Loads) > maxHotKeys {
		return false
	}
	for _, kvs := range [][]hotViewKV{v.Calls, v.Loads} {
		for _, kv := range kvs {
			if len(kv.Key) > 3*maxHotKeyBytes || !(kv.Rate >= 0 && kv.Rate <= maxHotRate) {
				return false
			}
		}
	}
	return true
}

// wrongType reports a WRONGTYPE reply: a value of another type under a
// name, which the guard did not write.
func wrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

// ranked lists rates highest first, ties by key.
func ranked(m map[string]float64) []HotKey {
	out := make([]HotKey, 0, len(m))
	for k, r := range m {
		out = append(out, HotKey{Key: k, PerSecond: r})
	}
	slices.SortFunc(out, func(a, b HotKey) int {
		if c := cmp.Compare(b.PerSecond, a.PerSecond); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}
