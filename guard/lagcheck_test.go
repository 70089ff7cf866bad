package guard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// The lag checker: node A changes keys while node B's readers spin on
// them, and every read of B that began after one of A's changes returned
// is judged against when that change returned.

// lagKeys is how many keys A changes, in turn: each changes every 32
// changes (about 350 ms), so a report B never applied leaves its copy
// stale for longer than the lag, where a key changed every 10 ms would
// have its copy dropped by the next change's report.
const lagKeys = 32

// lagKey is the key change n (or read n) is about.
func lagKey(n int64) string { return "lagged-" + strconv.FormatInt(n%lagKeys, 10) }

// lagRun is what a lag check runs on.
type lagRun struct {
	a, b *localNode
	// fault applies a fault after A's first changes and returns once it
	// cleared; it runs on the test's goroutine (it may fail the test).
	// nil: none.
	fault func()
	// back: B's tier must serve reads again after the fault cleared.
	back bool
	// confirm, when set, must succeed after a change for the change to
	// count: a failover may lose a write Redis acknowledged, which is
	// Redis's loss, not the tier's.
	confirm func(ctx context.Context) error
}

// lagReport is what a lag check saw: A's changes that returned and those
// that failed; B's reads, those that failed, the stale ones within the lag
// (allowed), those after it (not) and the latest; B's tier hits after the
// fault cleared; and the first late reads, for the log.
type lagReport struct {
	changes, werrs             int
	after                      int // changes that returned after the fault cleared
	reads, rerrs, within, late int
	max                        time.Duration
	back                       int64
	samples                    []string
}

func (r lagReport) String() string {
	return fmt.Sprintf("%d changes (%d failed, %d after the fault); %d reads (%d failed), %d stale within the lag, %d after, max %v; %d tier hits after the fault",
		r.changes, r.werrs, r.after, r.reads, r.rerrs, r.within, r.late, r.max, r.back)
}

// changeLog records A's changes that returned, per key.
type changeLog struct {
	mu   sync.Mutex
	keys [lagKeys][]change // in the order they returned
	n    int
}

// change is one of A's changes that returned: the version it wrote and
// when its Invalidate returned.
type change struct {
	v  int64
	at time.Time
}

// returned records that change v (of key lagKey(v)) returned at at. A
// change that failed is not recorded: it replaced nothing for sure, and
// the next one of its key that returns replaces every earlier version.
func (c *changeLog) returned(v int64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &c.keys[v%lagKeys]
	*k = append(*k, change{v, at})
	c.n++
}

// when returns when version v of key k was replaced, if it was: when the
// first change of k to a later version returned.
func (c *changeLog) when(k, v int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.keys[k%lagKeys]
	i := sort.Search(len(ch), func(i int) bool { return ch[i].v > v })
	if i == len(ch) {
		return time.Time{}, false
	}
	return ch[i].at, true
}

func (c *changeLog) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// runLagChecker changes the lagKeys keys on run.a in turn (a version
// every 10ms: an Invalidate, then a load of the next version), applies
// run.fault after the first changes, while two readers on run.b spin on
// the keys; it runs for 2s, and at least 1s and 10 of A's changes after
// the fault cleared (and, with run.back, until B's tier served again). A
// change counts once A's Invalidate and its load both returned without
// error, from when the Invalidate returned. It returns what B's reads
// saw.
func runLagChecker(t *testing.T, run lagRun) lagReport {
	t.Helper()
	var version atomic.Int64
	load := func(context.Context) ([]byte, error) { return []byte("v" + strconv.FormatInt(version.Load(), 10)), nil }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for k := range int64(lagKeys) {
		if _, err := run.a.Get(ctx, lagKey(k), load); err != nil {
			t.Fatal(err)
		}
	}
	var changes changeLog
	var r lagReport
	var mu sync.Mutex // guards r
	stop := make(chan struct{})
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // also when the fault fails the test

	var cleared atomic.Int64 // when the fault cleared (UnixNano); 0 before
	begin := time.Now()
	for range 2 {
		wg.Go(func() { readLagged(ctx, run.b.Group, load, &changes, &r, &mu, stop, begin) })
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			next := version.Add(1)
			err := run.a.Invalidate(ctx, lagKey(next))
			at := time.Now()
			if err == nil {
				_, err = run.a.Get(ctx, lagKey(next), load)
			}
			if err == nil && run.confirm != nil {
				err = run.confirm(ctx)
			}
			mu.Lock()
			if err != nil {
				r.werrs++
			} else {
				r.changes++
				if c := cleared.Load(); c != 0 && at.UnixNano() > c {
					r.after++
				}
				changes.returned(next, at)
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond) // the writer's pace, not a synchronisation
		}
	})
	redistest.Eventually(t, 10*time.Second, "A's first changes", func() bool { return changes.count() >= 20 })
	if run.fault != nil {
		run.fault()
	}
	end, hits := time.Now(), run.b.local.Load()
	cleared.Store(end.UnixNano())
	time.Sleep(max(time.Until(begin.Add(2*time.Second)), time.Until(end.Add(time.Second)))) // the run's length
	redistest.Eventually(t, 20*time.Second, "A's changes after the fault", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return r.after >= 10
	})
	if run.back {
		redistest.Eventually(t, 10*time.Second, "B's tier serving after the fault", func() bool { return run.b.local.Load() > hits })
	}
	halt()
	r.back = run.b.local.Load() - hits
	return r
}

// readLagged is one of B's readers: it reads the keys in turn until
// stop, and judges each read that got a version already replaced when it
// began.
func readLagged(ctx context.Context, b *Group, load LoadFunc, changes *changeLog, r *lagReport, mu *sync.Mutex, stop <-chan struct{}, begin time.Time) {
	for k := int64(0); ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		v, err := b.Get(ctx, lagKey(k), load)
		mu.Lock()
		r.reads++
		if err != nil {
			r.rerrs++ // counted, not stale
			mu.Unlock()
			continue
		}
		got, _ := strconv.ParseInt(strings.TrimPrefix(string(v), "v"), 10, 64)
		if at, ok := changes.when(k, got); ok && start.After(at) {
			late := start.Sub(at)
			r.max = max(r.max, late)
			if late > b.opts.LocalLag {
				r.late++
				if len(r.samples) < 5 {
					r.samples = append(r.samples, fmt.Sprintf("read of %s began %v into the run, got v%d, replaced %v before", lagKey(k), start.Sub(begin), got, late))
				}
			} else {
				r.within++
			}
		}
		mu.Unlock()
	}
}

// assertLag fails t when r holds a read of B that began more than lag
// after A's change returned and got the value it replaced, or when the
// run was vacuous.
func assertLag(t *testing.T, name string, r lagReport, lag time.Duration, back bool) {
	t.Helper()
	t.Logf("%s: %s", name, r)
	for _, s := range r.samples {
		t.Logf("late: %s", s)
	}
	if r.late > 0 {
		t.Errorf("%d reads of B began more than %v after A's change returned and got the replaced value (max %v)", r.late, lag, r.max)
	}
	if r.changes < 20 || r.after < 10 {
		t.Errorf("A made %d changes that returned, %d after the fault; want at least 20 and 10", r.changes, r.after)
	}
	if back && r.back == 0 {
		t.Errorf("B's tier served no read after the fault cleared")
	}
}
