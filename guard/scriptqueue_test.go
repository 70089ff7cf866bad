package guard

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/commit"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// holdFirst holds the first call of a script a client sends until release
// is closed, and counts the calls of it sent in pipelines.
type holdFirst struct {
	hash      string
	release   chan struct{}
	once      sync.Once
	pipelined atomic.Int64
	pipelines atomic.Int64
}

func (h *holdFirst) is(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && cmd.Name() == "evalsha" && args[1] == h.hash
}

func (h *holdFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.is(cmd) {
			h.once.Do(func() {
				select {
				case <-h.release:
				case <-time.After(10 * time.Second):
				}
			})
		}
		return next(ctx, cmd)
	}
}
func (h *holdFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if h.is(c) {
				n++
			}
		}
		if n > 0 {
			h.pipelines.Add(1)
			h.pipelined.Add(int64(n))
		}
		return next(ctx, cmds)
	}
}

// TestConcurrentMissesShareRoundTrips: the read scripts, and the fill
// scripts, of misses on different keys that arrive while one is in flight
// go out together, as one pipeline, and every caller gets its own key's
// value. The keys share a hash tag: on a cluster each master has a queue of
// its own (TestClusterQueuePerMaster).
func TestConcurrentMissesShareRoundTrips(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		for _, c := range []struct {
			name   string
			script *redis.Script
			queue  func(g *Group, nm names) *commit.Scripts
		}{
			{"read", lua.GuardRead, func(g *Group, nm names) *commit.Scripts { return g.readQ.For(ctxT(t), nm.readKeys()[0]) }},
			{"fill", lua.GuardFill, func(g *Group, nm names) *commit.Scripts { return g.fillQ.For(ctxT(t), nm.keys[0]) }},
		} {
			t.Run(c.name, func(t *testing.T) {
				const n = 16
				hook := &holdFirst{hash: c.script.Hash(), release: make(chan struct{})}
				rdb.AddHook(hook)
				g := newGroup(t, rdb, Options{})
				base := "{" + redistest.Key(t) + "}"
				var releaseOnce sync.Once
				c.queue(g, g.names(base+":0")).OnQueued(func(k int) {
					if k == n-1 {
						releaseOnce.Do(func() { close(hook.release) })
					}
				})
				missesShareRoundTrips(t, g, base, n)
				if got := hook.pipelined.Load(); got != n-1 {
					t.Errorf("%d %s scripts pipelined, want the %d that queued behind the first", got, c.name, n-1)
				}
				if hook.pipelines.Load() != 1 {
					t.Errorf("%d pipelines, want 1", hook.pipelines.Load())
				}
			})
		}
	})
}

func missesShareRoundTrips(t *testing.T, g *Group, base string, n int) {
	var loads atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := base + ":" + strconv.Itoa(i)
			v, err := g.Get(ctxT(t), key, func(context.Context) ([]byte, error) {
				loads.Add(1)
				return []byte(key), nil
			})
			if err != nil || string(v) != key {
				t.Errorf("%s: %q, %v", key, v, err)
			}
		})
	}
	wg.Wait()
	if got := loads.Load(); got != int64(n) {
		t.Errorf("%d loads, want %d", got, n)
	}
}
