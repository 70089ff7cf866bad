package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// cmdCounter counts the commands a client sends (each is one round trip
// here: the guard never pipelines), and the bytes of their arguments.
type cmdCounter struct {
	n     atomic.Int64
	bytes atomic.Int64
	mu    sync.Mutex
	names []string // every command counted, for failure messages
}

// add counts cmd unless it is connection set-up (HELLO, CLIENT SETINFO),
// which go-redis sends, pipelined, whenever the pool dials: not a round
// trip of the guard's.
func (h *cmdCounter) add(cmd redis.Cmder) {
	if name := cmd.Name(); name != "hello" && name != "client" {
		h.n.Add(1)
		for _, a := range cmd.Args() {
			switch v := a.(type) {
			case string:
				h.bytes.Add(int64(len(v)))
			case []byte:
				h.bytes.Add(int64(len(v)))
			}
		}
		h.mu.Lock()
		h.names = append(h.names, name)
		h.mu.Unlock()
	}
}

// since returns the names of the commands counted after the first n.
func (h *cmdCounter) since(n int64) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.names[min(int(n), len(h.names)):]...)
}

func (h *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.add(c)
		}
		return next(ctx, cmds)
	}
}

// TestRoundTripBudget holds the guard to DESIGN §4: a hit is one command; a
// stale read that wins the lease is the same one command; the leader's fill,
// lease release and wake-up is one more.
func TestRoundTripBudget(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		hook := &cmdCounter{}
		rdb.AddHook(hook)
		g := newGroup(t, rdb, Options{LockTTL: time.Minute})
		// Load the scripts on every master first: EVALSHA falls back to EVAL
		// once per server, which is not the steady state being measured.
		for name, s := range lua.All() {
			if err := s.Load(ctxT(t), rdb).Err(); err != nil {
				t.Fatalf("load %s: %v", name, err)
			}
		}
		var filled atomic.Int64
		load := func(context.Context) ([]byte, error) { filled.Add(1); return []byte("v"), nil }
		measure := func(f func()) int64 {
			before := hook.n.Load()
			f()
			return hook.n.Load() - before
		}

		key := redistest.Key(t, "cold")
		if n := measure(func() {
			if r, err := g.Do(ctxT(t), key, load); err != nil || r.Status != Miss {
				t.Fatalf("cold: %v %v", r.Status, err)
			}
		}); n != 2 {
			t.Errorf("cold miss, leader: %d commands %v, want 2 (read with lease, fill)", n, hook.since(hook.n.Load()-n))
		}
		if n := measure(func() {
			if r, err := g.Do(ctxT(t), key, load); err != nil || r.Status != Hit {
				t.Fatalf("hit: %v %v", r.Status, err)
			}
		}); n != 1 {
			t.Errorf("hit: %d commands, want 1", n)
		}

		skey := redistest.Key(t, "stale")
		putEntry(t, rdb, g, skey, "old", -1, 60_000, 1)
		started, gate := make(chan struct{}), make(chan struct{})
		var refresh int64
		var before int64
		stale := measure(func() {
			before = hook.n.Load()
			r, err := g.Do(ctxT(t), skey, func(context.Context) ([]byte, error) {
				refresh = hook.n.Load() - before
				close(started)
				<-gate
				return []byte("new"), nil
			})
			if err != nil || r.Status != Stale {
				t.Fatalf("stale: %v %v", r.Status, err)
			}
		})
		<-started
		close(gate)
		g.bg.Wait() // the background refresh has finished, its fill included
		if stale != 1 || refresh != 1 {
			t.Errorf("stale read that wins the lease: %d commands (%d before the refresh loads), want 1", stale, refresh)
		}
		if n := hook.n.Load() - before; n != 2 {
			t.Errorf("stale read + background refresh: %d commands, want 2 (read with lease, fill)", n)
		}
	})
}
