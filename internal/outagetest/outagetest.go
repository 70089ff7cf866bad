// Package outagetest drives a fleet through a Redis outage for the tests
// of guard and of every adapter: paced callers on hot keys across nodes,
// Redis killed (SIGKILL) and restarted on the same port, and the checks
// that the fleet degraded to a per-node cache and came back to one load
// per key per refresh.
package outagetest

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// Scenario is one outage: its fleet's shape and how a call is made.
type Scenario struct {
	Nodes, Keys int
	FreshFor    time.Duration // the Groups' FreshFor
	Outage      time.Duration // how long Redis is down
	Callers     int           // paced callers
	Pace        time.Duration // each caller's pause between calls
	// Call makes one call of key on node, and says how it ended.
	Call func(ctx context.Context, node, key int) error
	// Held reports whether every node holds every key in memory: the
	// outage begins then.
	Held func() bool
	// Loads counts the origin's loads.
	Loads *atomic.Int64
}

// Report is what happened.
type Report struct {
	Calls, Failed int           // calls begun during the outage, and how many failed
	P50           time.Duration // of the calls begun during the outage
	HeldP50       time.Duration // of the calls begun in the second before it
	During        int64         // origin loads during the outage
	After         int64         // origin loads in the 5s after Redis is back
	FirstErr      error
}

type call struct {
	at   time.Time
	took time.Duration
	err  error
}

// Run drives s on srv and returns its report.
func Run(t *testing.T, srv *redistest.Server, s Scenario) Report {
	t.Helper()
	var mu sync.Mutex
	var calls []call
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range s.Callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			tick := time.NewTicker(s.Pace)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				err := s.Call(ctx, rng.IntN(s.Nodes), rng.IntN(s.Keys))
				cancel()
				mu.Lock()
				calls = append(calls, call{at: start, took: time.Since(start), err: err})
				mu.Unlock()
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	redistest.Eventually(t, 30*time.Second, "every hot key held in memory by every node", s.Held)
	held := time.Now()
	time.Sleep(time.Second) // the steady state the outage's latency is judged against
	killed := time.Now()
	before := s.Loads.Load()
	srv.Kill(t)
	time.Sleep(s.Outage) // the outage's length: the condition under test
	during := s.Loads.Load() - before
	srv.Restart(t)
	back := time.Now()
	afterBack := s.Loads.Load()
	time.Sleep(5 * time.Second) // the window the recovery is judged over
	r := Report{During: during, After: s.Loads.Load() - afterBack}

	mu.Lock()
	defer mu.Unlock()
	var took, steady []time.Duration
	for _, c := range calls {
		if !c.at.Before(held) && c.at.Before(killed) {
			steady = append(steady, c.took)
		}
		if c.at.Before(killed) || !c.at.Before(back) {
			continue
		}
		r.Calls++
		took = append(took, c.took)
		if c.err != nil {
			r.Failed++
			if r.FirstErr == nil {
				r.FirstErr = c.err
			}
		}
	}
	r.P50, r.HeldP50 = median(took), median(steady)
	return r
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// Check fails t unless r holds to the bounds of a per-node cache: loads
// during the outage at most nodes x keys x (outage/FreshFor + 2), a p50
// of at most 3ms or twice the p50 of the second before the outage (a
// machine slowed by -race or by load serves even memory more slowly), no
// call failed, and at most 1.5 loads per key per refresh cycle in the 5s
// after Redis is back.
func (s Scenario) Check(t *testing.T, r Report) {
	t.Helper()
	limit := int64(s.Nodes * s.Keys * (int(s.Outage/s.FreshFor) + 2))
	cycles := int64(5*time.Second/s.FreshFor) + 1
	maxAfter := int64(1.5 * float64(int64(s.Keys)*cycles))
	maxP50 := max(3*time.Millisecond, 2*r.HeldP50)
	t.Logf("outage of %v: %d calls, %d loads (limit %d), p50 %v (before %v, limit %v), %d failed; %d loads in the 5s after (limit %d)",
		s.Outage, r.Calls, r.During, limit, r.P50, r.HeldP50, maxP50, r.Failed, r.After, maxAfter)
	if r.During > limit {
		t.Errorf("%d loads during the outage; want at most %d (nodes x keys x (outage/FreshFor + 2))", r.During, limit)
	}
	if r.P50 > maxP50 {
		t.Errorf("p50 of the calls during the outage %v; want at most %v (3ms, or twice the %v before it)", r.P50, maxP50, r.HeldP50)
	}
	if r.Failed > 0 {
		t.Errorf("%d of %d calls failed during the outage (the first: %v); want none", r.Failed, r.Calls, r.FirstErr)
	}
	if r.After > maxAfter {
		t.Errorf("%d loads in the 5s after Redis came back; want at most %d (1.5 per key per refresh cycle)", r.After, maxAfter)
	}
}

// LocalHits records, per node and key, when the node last served the key
// from memory (guard.Hooks.Hit with local set): a fleet holds its hot keys
// when every node served every one of them so lately.
type LocalHits struct {
	mu   sync.Mutex
	last map[[2]string]time.Time // node, key
}

// Hook returns the Hooks.Hit func of node.
func (l *LocalHits) Hook(node int) func(key string, _ time.Duration, local bool) {
	n := strconv.Itoa(node)
	return func(key string, _ time.Duration, local bool) {
		if local {
			l.mu.Lock()
			if l.last == nil {
				l.last = map[[2]string]time.Time{}
			}
			l.last[[2]string{n, key}] = time.Now()
			l.mu.Unlock()
		}
	}
}

// Held reports whether every one of nodes served keys distinct keys from
// memory within the last half second.
func (l *LocalHits) Held(nodes, keys int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) < nodes*keys {
		return false
	}
	for _, at := range l.last {
		if time.Since(at) > 500*time.Millisecond {
			return false
		}
	}
	return true
}
