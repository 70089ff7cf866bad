package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// origin is the slow backend behind the cache: a fake database whose every
// load takes latency and bumps the key's version.
type origin struct {
	latency  time.Duration
	loads    atomic.Int64 // loads started
	inflight atomic.Int64

	mu       sync.Mutex
	versions map[string]int64
}

func newOrigin(latency time.Duration) *origin {
	return &origin{latency: latency, versions: map[string]int64{}}
}

// load returns key's value, "key@vN", N counting the loads of key. It gives
// up with ctx's error if ctx ends first.
func (o *origin) load(ctx context.Context, key string) ([]byte, error) {
	o.loads.Add(1)
	o.inflight.Add(1)
	defer o.inflight.Add(-1)
	t := time.NewTimer(o.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	o.mu.Lock()
	o.versions[key]++
	v := o.versions[key]
	o.mu.Unlock()
	return fmt.Appendf(nil, "%s@v%d", key, v), nil
}

// idle waits, up to limit, until no load is running, so that loads still
// finishing after a run (background refreshes) are counted with it.
func (o *origin) idle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for o.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// checkValue reports a value that is not one the origin produced for key.
func checkValue(key string, v []byte) error {
	if !strings.HasPrefix(string(v), key+"@v") {
		return fmt.Errorf("wrong value for %q: %q", key, v)
	}
	return nil
}
