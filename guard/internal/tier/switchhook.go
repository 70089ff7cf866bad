package tier

// The dial hook of a *redis.Client: one per client, whatever the number of
// Groups made on it. go-redis removes no hook, so a hook per Group would
// stay on the client after its Group closed, and every dial would pass
// through all of them (BenchmarkDialClosedGroups: +200 µs a dial after
// 1,000 Groups; a Group per request would grow it without bound).

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

// hubs holds each client's hook, by the client, held weakly: the entry
// goes with the client.
var hubs sync.Map // weak.Pointer[redis.Client] -> *switchHook

// switchHook tells the coherences of the open Groups on a client of every
// connection it dials. It holds them weakly: an unclosed Group dropped is
// not kept.
type switchHook struct {
	mu   sync.Mutex // serialises add and remove
	cohs atomic.Pointer[[]weak.Pointer[coherence]]
}

// follow makes c told of r's dials, and returns what stops it (the
// Group's Close).
func follow(r *redis.Client, c *coherence) (stop func()) {
	k := weak.Make(r)
	v, loaded := hubs.LoadOrStore(k, new(switchHook))
	h := v.(*switchHook)
	if !loaded {
		r.AddHook(h)
		runtime.AddCleanup(r, func(k weak.Pointer[redis.Client]) { hubs.Delete(k) }, k)
	}
	w := weak.Make(c)
	h.update(func(cs []weak.Pointer[coherence]) []weak.Pointer[coherence] { return append(cs, w) })
	return func() {
		h.update(func(cs []weak.Pointer[coherence]) []weak.Pointer[coherence] {
			// Those collected go too.
			return slices.DeleteFunc(cs, func(x weak.Pointer[coherence]) bool { return x == w || x.Value() == nil })
		})
	}
}

// update replaces the list of coherences with f's copy of it.
func (h *switchHook) update(f func([]weak.Pointer[coherence]) []weak.Pointer[coherence]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var cs []weak.Pointer[coherence]
	if p := h.cohs.Load(); p != nil {
		cs = slices.Clone(*p)
	}
	cs = f(cs)
	h.cohs.Store(&cs)
}

func (h *switchHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err == nil && cn != nil {
			if p := h.cohs.Load(); p != nil {
				for _, w := range *p {
					if c := w.Value(); c != nil {
						c.dialed(cn.RemoteAddr())
					}
				}
			}
		}
		return cn, err
	}
}

func (*switchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*switchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
