package sched

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestPad(t *testing.T) {
	const timeout = 250 * time.Millisecond
	for _, c := range []struct{ late, want time.Duration }{
		{0, timeout},
		{-time.Second, timeout},
		{100 * time.Millisecond, 350 * time.Millisecond},
		{MaxPad * timeout, (1 + MaxPad) * timeout},
		{time.Hour, (1 + MaxPad) * timeout},
	} {
		if got := Pad(timeout, c.late); got != c.want {
			t.Errorf("Pad(%v, %v) = %v, want %v", timeout, c.late, got, c.want)
		}
	}
}

// fakeRuntime is a histogram of scheduling latencies that a test fills:
// buckets of 1, 2, 4 ... 512 ms, then one unbounded.
type fakeRuntime struct {
	h     metrics.Float64Histogram
	reads int
}

func newFakeRuntime() *fakeRuntime {
	f := &fakeRuntime{}
	for i := range 11 {
		f.h.Buckets = append(f.h.Buckets, float64(int(1)<<i)/1000)
	}
	f.h.Buckets = append(f.h.Buckets, math.Inf(1))
	f.h.Counts = make([]uint64, len(f.h.Buckets)-1)
	return f
}

// add records n latencies in the bucket whose lower bound is ms.
func (f *fakeRuntime) add(ms, n int) {
	for i, b := range f.h.Buckets {
		if b == float64(ms)/1000 {
			f.h.Counts[i] += uint64(n)
			return
		}
	}
	panic("no bucket starts at that latency")
}

func (f *fakeRuntime) read() *metrics.Float64Histogram {
	f.reads++
	return &f.h
}

// TestLate drives a Gauge through its windows on a fake clock and a fake
// histogram: a reading serves for every; a window closes with minSamples
// latencies or after maxWindow; its peak is held for hold.
func TestLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRuntime()
		g := &Gauge{read: f.read}
		late := func(want time.Duration) {
			t.Helper()
			if got := g.Late(); got != want {
				t.Fatalf("Late() = %v, want %v", got, want)
			}
		}
		late(0) // the first reading opens the first window
		f.add(256, minSamples)
		late(0) // within every: the reading before serves
		if f.reads != 1 {
			t.Fatalf("%d readings within every, want 1", f.reads)
		}
		time.Sleep(every)
		late(512 * time.Millisecond) // the bucket's upper bound

		// A lower window does not lower the peak within hold.
		time.Sleep(every)
		f.add(1, minSamples)
		late(512 * time.Millisecond)

		// A window of too few latencies stays open until maxWindow; past
		// hold, a lower window replaces the peak.
		time.Sleep(every)
		f.add(8, minSamples-1)
		late(512 * time.Millisecond)
		time.Sleep(maxWindow)
		late(16 * time.Millisecond)
		time.Sleep(hold + every)
		f.add(2, minSamples)
		late(4 * time.Millisecond)

		// An unbounded bucket counts as its lower bound; a window in
		// which no goroutine was scheduled (an idle process) as 0.
		time.Sleep(every)
		f.add(1024, minSamples)
		late(1024 * time.Millisecond)
		time.Sleep(hold + maxWindow)
		late(0)
	})
}

// TestLateOfAStarvedProcess starves this process for real (one P, more
// goroutines spinning than it runs at once): the Gauge sees goroutines
// wait at least one of the runtime's 10 ms time slices.
func TestLateOfAStarvedProcess(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var g Gauge
	g.Late() // opens the first window
	// The runtime samples one goroutine switch in eight, and on a loaded
	// host a round may hold few switches: a few rounds, one must show.
	for range 5 {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
				}
			})
		}
		wg.Wait()
		// A window closes within maxWindow of the first reading.
		for deadline := time.Now().Add(2 * maxWindow); time.Now().Before(deadline); time.Sleep(every) {
			if g.Late() >= 10*time.Millisecond {
				return
			}
		}
	}
	t.Errorf("Late() = %v after 5 rounds of 4 goroutines spinning for 200ms on one P, want at least 10ms", g.Late())
}
