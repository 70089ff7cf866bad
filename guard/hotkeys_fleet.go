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

// FleetHotKeys merges the hot keys every Group of the Namespace published
// lately, reading Redis and writing nothing.
func (g *Group) FleetHotKeys(ctx context.Context) (HotKeys, error) {
	index, prefix := hotNames(g.opts.Namespace)
	rctx, cancel := context.WithTimeout(ctx, g.opts.RedisTimeout)
	defer cancel()
	nodes, err := g.rdb.ZRange(rctx, index, 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return HotKeys{}, fmt.Errorf("guard: hot keys: %w", err)
	}
	if len(nodes) == 0 {
		return HotKeys{}, nil
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = prefix + n
	}
	vals, err := g.rdb.MGet(rctx, names...).Result()
	if err != nil {
		return HotKeys{}, fmt.Errorf("guard: hot keys: %w", err)
	}
	calls, loads := map[string]float64{}, map[string]float64{}
	var hk HotKeys
	for _, v := range vals {
		s, ok := v.(string)
		var view hotView
		if !ok || json.Unmarshal([]byte(s), &view) != nil || view.V != hotViewVersion {
			continue // expired, or not a view this version reads
		}
		hk.Nodes++
		for _, kv := range view.Calls {
			calls[kv.Key] += kv.Rate
		}
		for _, kv := range view.Loads {
			loads[kv.Key] += kv.Rate
		}
	}
	hk.Calls, hk.Loads = ranked(calls), ranked(loads)
	return hk, nil
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
