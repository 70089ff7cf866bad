package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestHotKeysForeign writes generated foreign data under the names of
// the published hot keys (ns{~hotkeys}:nodes, the index, and
// ns{~hotkeys}:node:<id>, a view) beside one Group's real view, then
// reads the fleet's hot keys. Each round checks that FleetHotKeys reads a
// bounded number of bytes, and either says clearly that the index is
// foreign or answers with the real view's keys (unless a flood of members
// crowds it out of the publishers read) and only well-formed rankings
// (finite rates of at least 0, keys no longer than a published one, no
// more than the views hold, none from a view that is not a Group's); and
// that the next publication heals the index and reports it. Not
// generated, being views a Group could have published: a view that is
// well formed.
func TestHotKeysForeign(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	reads := &replyCounter{}
	rc := otherClient(t, rdb)
	rc.AddHook(reads)
	ns := strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"
	o := Options{Namespace: ns}
	reader := newGroup(t, rc, o)
	var dropped atomic.Int64
	o.Hooks.Corrupt = func(key string, _ error) {
		if key == "{"+hotTag+"}" {
			dropped.Add(1)
		}
	}
	g := newGroup(t, rdb, o)
	h := ownHotWindows(g)
	index, prefix := hotNames(ns)
	seed := uint64(time.Now().UnixNano())
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	t.Logf("seed %d (replay: -guard.seed=%d)", seed, seed)
	r := newRand(seed, 0)
	for i, kind := range hotPoisonKinds {
		name := fmt.Sprintf("round %d, %s", i, kind)
		for range 40 {
			h.calls.Add("hot")
		}
		g.endHotWindow(h, time.Second) // the real view
		if err := plantHot(ctxT(t), rdb, r, kind, index, prefix); err != nil {
			t.Fatalf("%s: planting: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b0 := reads.bytes.Load()
		hk, err := reader.FleetHotKeys(ctx) // a hang ends in ctx's error
		cancel()
		if n := reads.bytes.Load() - b0; n > maxHotRead+1<<20 {
			t.Errorf("%s: FleetHotKeys read %d bytes, want at most about %d", name, n, maxHotRead)
		}
		switch {
		case strings.HasPrefix(kind, "index: "):
			if err == nil || !strings.Contains(err.Error(), "guard: hot keys") {
				t.Errorf("%s: FleetHotKeys = %v, %v; want an error saying the index is foreign", name, head(hk.Calls), err)
			}
		case err != nil:
			t.Errorf("%s: FleetHotKeys: %v", name, err)
		default:
			if bad := malformedHot(hk); bad != "" {
				t.Errorf("%s: FleetHotKeys answered %s", name, bad)
			}
			// 50,000 members listed as publishing now crowd the real
			// one out of the maxHotNodes read: bounded, not merged.
			if kind != "index of 50,000 members" && !slicesHas(hk.Calls, "hot") {
				t.Errorf("%s: the real view's key is missing: %v", name, head(hk.Calls))
			}
		}
		// Healed by the next publication.
		d0 := dropped.Load()
		h.calls.Add("hot")
		g.endHotWindow(h, time.Second)
		if strings.HasPrefix(kind, "index: ") && dropped.Load() == d0 {
			t.Errorf("%s: the foreign index was not reported to Hooks.Corrupt", name)
		}
		if typ := rdb.Type(ctxT(t), index).Val(); typ != "zset" {
			t.Errorf("%s: after a publication the index is a %s, want a zset", name, typ)
		}
		if _, err := reader.FleetHotKeys(ctxT(t)); err != nil {
			t.Errorf("%s: after a publication: %v", name, err)
		}
		if err := rdb.Del(ctxT(t), index).Err(); err != nil {
			t.Fatal(err)
		}
		for _, n := range rdb.Keys(ctxT(t), prefix+"x*").Val() {
			rdb.Del(ctxT(t), n)
		}
	}
}

// hotPoisonKinds are the kinds plantHot makes, one round each.
var hotPoisonKinds = []string{
	"index: string", "index: hash", "index: list", "index: set", "index: stream",
	"index of 50,000 members", "index with 1 MB members", "index with scores far ahead",
	"view: hash", "view: list", "view binary", "view 10 MB", "view not JSON", "view of 100,000 keys",
	"view infinite rates", "view negative rates", "view 1 MB key", "view without TTL", "view of another version",
}

// plantHot writes foreign data of kind under the hot keys' names. A view
// is planted under a name of its own, listed in the index as a Group's
// that published a moment ago.
func plantHot(ctx context.Context, rdb redis.UniversalClient, r *rand.Rand, kind, index, prefix string) error {
	soon := float64(time.Now().Add(10 * time.Second).UnixMilli())
	node := "x" + strconv.Itoa(r.IntN(1000))
	view := prefix + node
	list := func() error { return rdb.ZAdd(ctx, index, redis.Z{Score: soon, Member: node}).Err() }
	viewJSON := func(v hotView) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := rdb.Set(ctx, view, b, time.Minute).Err(); err != nil {
			return err
		}
		return list()
	}
	kv := func(key string, rate float64) []hotViewKV { return []hotViewKV{{Key: key, Rate: rate}} }
	p := rdb.Pipeline()
	switch kind {
	case "index: string", "index: hash", "index: list", "index: set", "index: stream":
		p.Del(ctx, index)
		plantType(ctx, p, index, strings.TrimPrefix(kind, "index: "))
	case "index of 50,000 members":
		zs := make([]redis.Z, 50_000)
		for i := range zs {
			zs[i] = redis.Z{Score: soon, Member: "x" + strconv.Itoa(i)}
		}
		p.ZAdd(ctx, index, zs...)
	case "index with 1 MB members":
		for i := range 8 {
			p.ZAdd(ctx, index, redis.Z{Score: soon, Member: "x" + strconv.Itoa(i) + strings.Repeat("m", 1<<20)})
		}
	case "index with scores far ahead":
		p.ZAdd(ctx, index, redis.Z{Score: math.Inf(1), Member: node}, redis.Z{Score: 1e18, Member: node + "y"})
		p.Set(ctx, view, `{"v":1,"node":"x","window_ms":1000,"calls":[{"key":"ahead","per_second":1}],"loads":[]}`, time.Minute)
	case "view: hash", "view: list":
		plantType(ctx, p, view, strings.TrimPrefix(kind, "view: "))
		p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node})
	case "view binary":
		b := make([]byte, 1+r.IntN(100))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		p.Set(ctx, view, b, time.Minute)
		p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node})
	case "view 10 MB":
		for i := range 2 {
			big := `{"v":1,"node":"x","window_ms":1000,"calls":[{"key":"big","per_second":1}],"loads":[],"pad":"` +
				strings.Repeat("p", 10<<20) + `"}`
			p.Set(ctx, view+strconv.Itoa(i), big, time.Minute)
			p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node + strconv.Itoa(i)})
		}
	case "view not JSON":
		p.Set(ctx, view, "{not json", time.Minute)
		p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node})
	case "view of 100,000 keys":
		many := make([]hotViewKV, 100_000)
		for i := range many {
			many[i] = hotViewKV{Key: "many" + strconv.Itoa(i), Rate: 1}
		}
		return viewJSON(hotView{V: hotViewVersion, Node: node, Window: 1000, Calls: many})
	case "view infinite rates":
		// Each finite, their sum not.
		for i := range 2 {
			b, _ := json.Marshal(hotView{V: hotViewVersion, Node: node, Window: 1000, Calls: kv("hot", math.MaxFloat64)})
			p.Set(ctx, view+strconv.Itoa(i), b, time.Minute)
			p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node + strconv.Itoa(i)})
		}
	case "view negative rates":
		return viewJSON(hotView{V: hotViewVersion, Node: node, Window: 1000, Calls: kv("negative", -5), Loads: kv("hot", -1e9)})
	case "view 1 MB key":
		return viewJSON(hotView{V: hotViewVersion, Node: node, Window: 1000, Calls: kv(strings.Repeat("k", 1<<20), 1)})
	case "view without TTL":
		b, _ := json.Marshal(hotView{V: hotViewVersion, Node: node, Window: 1000, Calls: kv("forever", 1)})
		p.Set(ctx, view, b, 0)
		p.ZAdd(ctx, index, redis.Z{Score: soon, Member: node})
	case "view of another version":
		return viewJSON(hotView{V: hotViewVersion + 1, Node: node, Window: 1000, Calls: kv("v2", 1)})
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	_, err := p.Exec(ctx)
	return err
}

// plantType queues a value of Redis type typ under name.
func plantType(ctx context.Context, p redis.Pipeliner, name, typ string) {
	switch typ {
	case "string":
		p.Set(ctx, name, "not a zset", 0)
	case "hash":
		p.HSet(ctx, name, "f", "v")
	case "list":
		p.RPush(ctx, name, "a")
	case "set":
		p.SAdd(ctx, name, "a")
	case "stream":
		p.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: []any{"f", "v"}})
	}
}

// malformedHot says what in hk no merge of views a Group publishes
// holds, or "".
func malformedHot(hk HotKeys) string {
	for _, ks := range [][]HotKey{hk.Calls, hk.Loads} {
		if len(ks) > maxHotKeys*max(hk.Nodes, 1) {
			return fmt.Sprintf("%d keys from %d views", len(ks), hk.Nodes)
		}
		for _, k := range ks {
			switch {
			case math.IsInf(k.PerSecond, 0) || math.IsNaN(k.PerSecond) || k.PerSecond < 0:
				return fmt.Sprintf("a rate of %v for %.20q", k.PerSecond, k.Key)
			case len(k.Key) > maxHotKeyBytes || !utf8.ValidString(k.Key):
				return fmt.Sprintf("a key of %d bytes (%.20q)", len(k.Key), k.Key)
			case k.Key == "forever" || k.Key == "ahead" || k.Key == "big":
				return fmt.Sprintf("%q, from a view no Group published lately", k.Key)
			}
		}
	}
	return ""
}

func slicesHas(ks []HotKey, key string) bool {
	for _, k := range ks {
		if k.Key == key {
			return true
		}
	}
	return false
}

// replyCounter counts the bytes of the string replies a client reads.
type replyCounter struct{ bytes atomic.Int64 }

func (h *replyCounter) count(cmd redis.Cmder) {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		h.bytes.Add(int64(len(c.Val())))
	case *redis.StringSliceCmd:
		for _, s := range c.Val() {
			h.bytes.Add(int64(len(s)))
		}
	case *redis.SliceCmd:
		for _, v := range c.Val() {
			if s, ok := v.(string); ok {
				h.bytes.Add(int64(len(s)))
			}
		}
	}
}

func (h *replyCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *replyCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}
func (h *replyCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c)
		}
		return err
	}
}

// TestHotKeysLongMembersNotSentBack: members of the publishers' index
// longer than any Group's name are skipped and counted, not sent back to
// Redis as names to read: five of 20 MB each cost `stampede top` 300 MB,
// each sent back twice (STRLEN, PTTL).
func TestHotKeysLongMembersNotSentBack(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := ctxT(t)
	ns := "long:"
	g := newGroup(t, rdb, Options{Namespace: ns})
	index, _ := hotNames(ns)
	score := float64(time.Now().Add(time.Minute).UnixMilli())
	for i := range 5 {
		m := strconv.Itoa(i) + strings.Repeat("n", 1<<20)
		if err := rdb.ZAdd(ctx, index, redis.Z{Score: score, Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	received := func() int64 {
		v, err := rdb.InfoMap(ctx, "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(v["Stats"]["total_net_input_bytes"], 10, 64)
		return n
	}
	before := received()
	hk, err := g.FleetHotKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := received() - before; n > 64<<10 {
		t.Errorf("FleetHotKeys sent Redis %d bytes for an index of five 1 MiB members; want none of them sent back", n)
	}
	if hk.Foreign != 5 || hk.Nodes != 0 {
		t.Errorf("FleetHotKeys = %d nodes, %d foreign; want 0 and 5", hk.Nodes, hk.Foreign)
	}
}
