package commit

import (
	"context"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestDrainLate: a flusher hands its flushes the time it waited to run
// since it was started; on a starved process that is long.
func TestDrainLate(t *testing.T) {
	var got []time.Duration
	c := &queue[int]{max: 1}
	c.flush = func(_ []int, late time.Duration) { got = append(got, late) }
	c.q, c.inflight, c.busy, c.flushing = []int{1, 2}, 1, true, 1 // as kick leaves it
	c.drain(time.Now().Add(-300 * time.Millisecond))
	if len(got) != 2 || got[0] < 300*time.Millisecond || got[1] < got[0] {
		t.Errorf("flushes were handed %v, want two of at least 300ms", got)
	}
}

// TestLateFlushSent: a batch whose flusher ran late is sent with the
// time its callers waited for this process added to their RedisTimeout,
// rather than failed unsent because that time passed.
func TestLateFlushSent(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const timeout, late = time.Second, 3 * time.Second
	rt := func() time.Duration { return timeout }
	queued := time.Now().Add(-2 * timeout) // its RedisTimeout spent waiting to be sent

	hits := NewHits(rdb, 8, rt)
	r := &getReq{name: "k", enq: queued, done: make(chan struct{}, 1)}
	hits.flushGets([]*getReq{r}, late)
	if r.err != nil || r.val != "v" {
		t.Errorf("GET: %q, %v; want \"v\", nil", r.val, r.err)
	}

	scripts := NewScripts(rdb, lua.GuardRead, 8, rt)
	s := &scriptReq{call: lua.Call{Keys: []string{"e", "e:lease", "e:fence", "e:w"}, Args: []any{0, "", 0, 1000, "0"}},
		enq: queued, done: make(chan struct{}, 1)}
	scripts.flushScripts([]*scriptReq{s}, late)
	if s.err != nil {
		t.Errorf("read script: %v", s.err)
	}
}
