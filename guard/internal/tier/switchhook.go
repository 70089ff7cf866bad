package tier

// What the tier registers on the user's client: one registration per
// client, whatever the number of Groups made on it. go-redis removes no
// hook and no OnNewNode callback, so one per Group would stay on the
// client after its Group closed, and every dial (or every node met) would
// pass through all of them (BenchmarkDialClosedGroups: +200 µs a dial
// after 1,000 Groups; a Group per request would grow it without bound).

import (
	"context"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// hubs holds each client's followers, by the client, held weakly (a
// weak.Pointer to a *redis.Client or a *redis.ClusterClient): the entry
// goes with the client.
var hubs sync.Map

// followers are the coherences of the open Groups on one client, held
// weakly: an unclosed Group dropped is not kept.
type followers struct {
	mu   sync.Mutex // serialises join and leave
	cohs atomic.Pointer[[]weak.Pointer[coherence]]
}

// followersOf returns r's followers; attach registers them on r, the
// first time only.
func followersOf[K any](r *K, attach func(*followers)) *followers {
	k := weak.Make(r)
	v, loaded := hubs.LoadOrStore(k, new(followers))
	f := v.(*followers)
	if !loaded {
		attach(f)
		runtime.AddCleanup(r, func(k weak.Pointer[K]) { hubs.Delete(k) }, k)
	}
	return f
}

// follow makes c told of r's dials (switch.go), and returns what stops
// it (the Group's Close).
func follow(r *redis.Client, c *coherence) (stop func()) {
	return followersOf(r, func(f *followers) { r.AddHook(switchHook{f}) }).join(c)
}

// followNodes makes c told of each node r meets, before any command is
// sent to it (newNode), and returns what stops it.
func followNodes(r *redis.ClusterClient, c *coherence) (stop func()) {
	return followersOf(r, func(f *followers) {
		r.OnNewNode(func(*redis.Client) { f.each((*coherence).newNode) })
	}).join(c)
}

// join adds c, and returns what takes it off.
func (f *followers) join(c *coherence) (leave func()) {
	w := weak.Make(c)
	f.update(func(cs []weak.Pointer[coherence]) []weak.Pointer[coherence] { return append(cs, w) })
	return func() {
		f.update(func(cs []weak.Pointer[coherence]) []weak.Pointer[coherence] {
			// Those collected go too.
			return slices.DeleteFunc(cs, func(x weak.Pointer[coherence]) bool { return x == w || x.Value() == nil })
		})
	}
}

// update replaces the list of coherences with g's copy of it.
func (f *followers) update(g func([]weak.Pointer[coherence]) []weak.Pointer[coherence]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []weak.Pointer[coherence]
	if p := f.cohs.Load(); p != nil {
		cs = slices.Clone(*p)
	}
	cs = g(cs)
	f.cohs.Store(&cs)
}

// each calls g with every coherence still held.
func (f *followers) each(g func(*coherence)) {
	if p := f.cohs.Load(); p != nil {
		for _, w := range *p {
			if c := w.Value(); c != nil {
				g(c)
			}
		}
	}
}

// switchHook is the dial hook of a *redis.Client: it tells its followers
// of every connection the client dials.
type switchHook struct{ f *followers }

func (h switchHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err == nil && cn != nil {
			ra := cn.RemoteAddr()
			h.f.each(func(c *coherence) { c.dialed(ra) })
		}
		return cn, err
	}
}

func (switchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (switchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
