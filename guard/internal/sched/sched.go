// Package sched tells how late this process runs its goroutines, so that
// a Redis call on a starved process (its CPU saturated) is given the time
// its reply waits to be read, and its timeout is not taken for Redis's.
//
// On a busy process, a goroutine woken by a Redis reply waits in the run
// queue, while the timer of its deadline is served at once: the read
// fails with a timeout although the reply sits in the socket. RedisTimeout
// is meant to measure Redis, not the run queue.
package sched

import (
	"math"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// every is how long one reading of the runtime's histogram serves.
const every = 10 * time.Millisecond

// A window of readings closes once the runtime has sampled minSamples
// latencies in it (it samples one goroutine switch in eight), or after
// maxWindow. A starved process switches goroutines seldom (each runs its
// whole time slice): a window of few switches would often hold none, and
// say "not late" when the process is most late.
const (
	minSamples = 8
	maxWindow  = time.Second
)

// hold is how long the peak of a window is kept. The reads that wait in
// the run queue are seldom among the switches the runtime samples, and
// the windows of a starved process jump between a few ms and its
// longest waits.
const hold = time.Second

// MaxPad bounds Pad's padding, in timeouts: a padded call is bounded by
// 1+MaxPad times its timeout.
const MaxPad = 3

// Gauge reads the runtime's histogram of scheduling latencies (how long
// runnable goroutines waited before they ran), at most once per every,
// and keeps the peak of its windows for about hold. The zero value is
// ready to use; a Gauge is safe for concurrent use.
type Gauge struct {
	late atomic.Int64 // ns: the peak held
	at   atomic.Int64 // unix ns of the last reading; 0: none yet

	mu     sync.Mutex // one reader at a time
	sample []metrics.Sample
	prev   []uint64 // the counts when the window opened
	opened int64    // unix ns: when it opened
	peakAt int64    // unix ns: when the peak held was seen
	// read, when set (tests), replaces the runtime's histogram.
	read func() *metrics.Float64Histogram
}

// Late returns the largest scheduling latency (the upper bound of its
// histogram bucket) of the windows closed since the peak held was seen,
// that peak included, if it was seen within hold; else of the last
// window. 0 until a window closed.
func (g *Gauge) Late() time.Duration {
	if at := g.at.Load(); at != 0 && time.Now().UnixNano()-at < int64(every) {
		return time.Duration(g.late.Load())
	}
	if g.mu.TryLock() {
		g.take()
		g.mu.Unlock()
	}
	return time.Duration(g.late.Load())
}

// Pad returns timeout plus late, the padding at most MaxPad timeouts.
func Pad(timeout, late time.Duration) time.Duration {
	return timeout + min(max(late, 0), MaxPad*timeout)
}

// take takes a reading, with mu held.
func (g *Gauge) take() {
	now := time.Now().UnixNano()
	g.at.Store(now)
	h := g.histogram()
	if h == nil {
		return // a runtime without the metric: never padded
	}
	if g.prev != nil {
		if sampled(h, g.prev) < minSamples && now-g.opened < int64(maxWindow) {
			return // the window stays open
		}
		if l := largest(h, g.prev); l >= time.Duration(g.late.Load()) || now-g.peakAt > int64(hold) {
			g.late.Store(int64(l))
			g.peakAt = now
		}
	}
	g.prev, g.opened = append(g.prev[:0], h.Counts...), now
}

// histogram reads the runtime's histogram of scheduling latencies; nil
// when the runtime has none.
func (g *Gauge) histogram() *metrics.Float64Histogram {
	if g.read != nil {
		return g.read()
	}
	if g.sample == nil {
		g.sample = []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	}
	metrics.Read(g.sample) // reuses the histogram's slices: no allocation
	if g.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return g.sample[0].Value.Float64Histogram()
}

// sampled returns how many latencies h holds more than prev.
func sampled(h *metrics.Float64Histogram, prev []uint64) uint64 {
	var n uint64
	for i, c := range h.Counts {
		if i < len(prev) {
			c -= prev[i]
		}
		n += c
	}
	return n
}

// largest returns the upper bound of the highest bucket of h that grew
// since prev (its lower bound, for the last bucket, which is unbounded);
// 0 when none grew.
func largest(h *metrics.Float64Histogram, prev []uint64) time.Duration {
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if i < len(prev) && h.Counts[i] == prev[i] {
			continue
		}
		top := h.Buckets[i+1]
		if math.IsInf(top, 1) {
			top = h.Buckets[i]
		}
		return time.Duration(top * float64(time.Second))
	}
	return 0
}
