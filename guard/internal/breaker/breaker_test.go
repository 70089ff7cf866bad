package breaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeCall runs one call through b the way Do does: ask, defer the
// release, then end as end says.
func probeCall(b *Breaker, end func(b *Breaker)) (probe uint64, allowed bool) {
	return probeCallTo(b, new(uint64), end)
}

// probeCallTo is probeCall that also stores the probe in *got before the
// call ends, for calls that end by panicking or by runtime.Goexit.
func probeCallTo(b *Breaker, got *uint64, end func(b *Breaker)) (probe uint64, allowed bool) {
	probe, allowed = b.Allow()
	if !allowed {
		return probe, false
	}
	*got = probe
	defer b.Release(probe)
	end(b)
	return probe, true
}

// TestBreaker drives the breaker through every way its probe can end, on a
// fake clock: each row opens the breaker, lets the cooldown pass, ends the
// probe its way, and checks the state that follows, the hook's events (one per
// transition: a failed probe leaves the breaker open, unreported), and
// that a caller arriving during the probe is kept off Redis.
func TestBreaker(t *testing.T) {
	const cooldown = 300 * time.Millisecond
	errRedis := errors.New("dial tcp: i/o timeout")
	errWrongType := redis.Error(proto("WRONGTYPE Operation against a key holding the wrong kind of value"))
	rows := []struct {
		name string
		end  func(b *Breaker)
		// After the probe ended:
		wantOpen      bool // the breaker still keeps callers off Redis
		wantNextProbe bool // the next call is let through at once as a new probe
		wantHooks     []bool
	}{
		{name: "value", end: func(b *Breaker) { b.Record(nil, nil) },
			wantHooks: []bool{true, false}},
		{name: "wrongtype", end: func(b *Breaker) { b.Record(errWrongType, nil) },
			wantHooks: []bool{true, false}},
		{name: "error", end: func(b *Breaker) { b.Record(errRedis, nil) },
			wantOpen: true, wantHooks: []bool{true}}, // a failed probe is no new transition
		{name: "redis timeout", end: func(b *Breaker) { b.Record(context.DeadlineExceeded, nil) },
			wantOpen: true, wantHooks: []bool{true}}, // a failed probe is no new transition
		{name: "cancel", end: func(b *Breaker) { b.Record(context.Canceled, context.Canceled) },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "caller deadline", end: func(b *Breaker) { b.Record(context.DeadlineExceeded, context.DeadlineExceeded) },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "no Redis call (closed Group)", end: func(*Breaker) {},
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "panic", end: func(*Breaker) { panic("loader bug") },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
		{name: "goexit", end: func(*Breaker) { runtime.Goexit() },
			wantOpen: true, wantNextProbe: true, wantHooks: []bool{true}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var hooks []bool
				b := &Breaker{Threshold: 3, Cooldown: cooldown, Hook: func(open bool) {
					mu.Lock()
					hooks = append(hooks, open)
					mu.Unlock()
				}}
				// Closed: calls go through, carrying no probe.
				for range 3 {
					p, ok := probeCall(b, func(b *Breaker) { b.Record(errRedis, nil) })
					if !ok || p != 0 {
						t.Fatalf("closed breaker: allow = %d, %v; want 0, true", p, ok)
					}
				}
				if _, ok := b.Allow(); ok || !b.Open() {
					t.Fatal("3 failures in a row did not open the breaker")
				}
				time.Sleep(cooldown - time.Millisecond)
				if _, ok := b.Allow(); ok {
					t.Fatal("a call went through before the cooldown ended")
				}
				time.Sleep(time.Millisecond)

				// The probe; a caller arriving meanwhile stays off Redis.
				started, during := make(chan struct{}), make(chan bool, 1)
				done := make(chan uint64)
				go func() {
					var probe uint64
					defer func() { done <- probe }()
					defer func() { _ = recover() }()
					probeCallTo(b, &probe, func(b *Breaker) {
						close(started)
						_, ok := b.Allow()
						during <- ok
						row.end(b)
					})
				}()
				<-started
				if <-during {
					t.Fatal("a second call went through while the probe was out")
				}
				if probe := <-done; probe == 0 {
					t.Fatal("the call after the cooldown carried no probe")
				}

				if got := b.Open(); got != row.wantOpen {
					t.Fatalf("open = %v; want %v", got, row.wantOpen)
				}
				next, ok := b.Allow()
				switch {
				case !row.wantOpen && (!ok || next != 0):
					t.Fatalf("closed breaker: allow = %d, %v; want 0, true", next, ok)
				case row.wantOpen && row.wantNextProbe && (!ok || next == 0):
					t.Fatalf("allow = %d, %v; want the next call to probe at once", next, ok)
				case row.wantOpen && !row.wantNextProbe && ok:
					t.Fatal("a call went through right after a failed probe; want a new cooldown")
				}
				if row.wantOpen && !row.wantNextProbe {
					// A new cooldown, then a new probe.
					time.Sleep(cooldown)
					if p, ok := b.Allow(); !ok || p == 0 {
						t.Fatalf("after the new cooldown allow = %d, %v; want a probe", p, ok)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if !slices.Equal(hooks, row.wantHooks) {
					t.Fatalf("hook events %v; want %v", hooks, row.wantHooks)
				}
			})
		})
	}
}

// TestBreakerStaleRelease: a probe's release that arrives after another
// verdict and a newer probe must not free the newer probe's slot.
func TestBreakerStaleRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Breaker{Threshold: 1, Cooldown: time.Second}
		b.Failure()
		time.Sleep(time.Second)
		first, _ := b.Allow()
		b.Failure() // another call's verdict: open again
		time.Sleep(time.Second)
		second, ok := b.Allow()
		if !ok || second == 0 || second == first {
			t.Fatalf("second probe = %d, %v", second, ok)
		}
		b.Release(first)
		if _, ok := b.Allow(); ok {
			t.Fatal("the first probe's late release freed the second probe's slot")
		}
		b.Release(second)
		if p, ok := b.Allow(); !ok || p == 0 {
			t.Fatal("releasing the probe out did not let the next call probe")
		}
	})
}

// TestBreakerConcurrentProbe: of many callers arriving once the cooldown
// has passed, exactly one probes.
func TestBreakerConcurrentProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Breaker{Threshold: 1, Cooldown: time.Second}
		b.Failure()
		time.Sleep(time.Second)
		var mu sync.Mutex
		probes := 0
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				if p, ok := b.Allow(); ok {
					mu.Lock()
					probes++
					mu.Unlock()
					if p == 0 {
						panic("allowed with no probe")
					}
				}
			})
		}
		wg.Wait()
		if probes != 1 {
			t.Fatalf("%d callers probed; want 1", probes)
		}
	})
}

// TestBreakerBackgroundProbe: with Probe set, no caller is let through
// while the breaker is open; of the callers that find the cooldown
// passed, one starts the probe, and nothing more until its verdict:
// Redis answered closes the breaker (Recovered and the hook told once);
// a failure opens it for another cooldown; ErrNoVerdict lets the next call
// start another at once.
func TestBreakerBackgroundProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var verdicts []func(error)
		var mu sync.Mutex
		var recovered, closed int
		b := &Breaker{Threshold: 1, Cooldown: time.Second,
			Recovered: func() bool { recovered++; return true },
			Hook: func(open bool) {
				if !open {
					closed++
				}
			},
			Probe: func(_ string, v func(error)) { mu.Lock(); verdicts = append(verdicts, v); mu.Unlock() }}
		asks := func() {
			t.Helper()
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					if p, ok := b.AllowKey("k"); ok || p != 0 {
						t.Errorf("a caller let through (probe %d) while the breaker is open", p)
					}
				})
			}
			wg.Wait()
		}
		probes := func(want int) {
			t.Helper()
			mu.Lock()
			defer mu.Unlock()
			if len(verdicts) != want {
				t.Fatalf("%d probes started; want %d", len(verdicts), want)
			}
		}
		b.Failure()
		asks()
		probes(0) // within the cooldown
		time.Sleep(time.Second)
		asks()
		probes(1)
		verdicts[0](errors.New("i/o timeout")) // still down
		asks()
		probes(1) // a new cooldown
		time.Sleep(time.Second)
		asks()
		probes(2)
		verdicts[1](ErrNoVerdict) // the Group is closing
		asks()
		probes(3) // no verdict: the next call starts another
		verdicts[2](nil)
		if p, ok := b.Allow(); !ok || p != 0 {
			t.Fatalf("after the probe's success: Allow = %d, %v; want a plain call", p, ok)
		}
		if recovered != 1 || closed != 1 {
			t.Fatalf("Recovered %d times, the hook told closed %d times; want 1 and 1", recovered, closed)
		}
		verdicts[2](nil) // a second verdict of one probe changes nothing
		probes(3)
	})
}

type proto string

func (p proto) Error() string { return string(p) }
func (proto) RedisError()     {}

// TestBreakerCountsOnlyUnwell: the breaker counts the failures that say
// Redis itself is unwell, never an error reply about one key's data.
func TestBreakerCountsOnlyUnwell(t *testing.T) {
	for _, c := range []struct {
		err    error
		counts bool
	}{
		{proto("ERR value is not an integer or out of range script: abc, on @user_script:12."), false},
		{proto("ERR increment or decrement would overflow"), false},
		{proto("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{proto("ERR user_script:1: Script attempted to access nonexistent global variable"), false},
		{proto("NOPERM this user has no permissions to access one of the keys used as arguments"), true},
		{proto("LOADING Redis is loading the dataset in memory"), true},
		{proto("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{proto("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{proto("CLUSTERDOWN The cluster is down"), true},
		{proto("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{proto("READONLY You can't write against a read only replica."), true},
		{proto("OOM command not allowed when used memory > 'maxmemory'."), true},
		{proto("NOREPLICAS Not enough good replicas to write."), true},
		{proto("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), true},
		{proto("ERR max number of clients reached"), true},
		{proto("ERR The user executing the script can't run this command or subcommand script: 71, on @user_script:11."), true},
		{context.DeadlineExceeded, true},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{redis.ErrClosed, true},
	} {
		b := Breaker{Threshold: 1, Cooldown: time.Hour}
		b.Record(c.err, nil)
		if got := b.Open(); got != c.counts {
			t.Errorf("%v: breaker open %v; want %v", c.err, got, c.counts)
		}
	}
}

// TestBreakerStarved: on a starved process a timeout is no verdict on
// Redis (its reply may have waited to be read); any other failure still
// counts, and a timeout counts once the process runs on time.
func TestBreakerStarved(t *testing.T) {
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	for _, c := range []struct {
		err     error
		starved bool
		counts  bool
	}{
		{context.DeadlineExceeded, true, false},
		{readTimeout, true, false},
		{fmt.Errorf("guard: read: %w", readTimeout), true, false},
		{refused, true, true},
		{proto("LOADING Redis is loading the dataset in memory"), true, true},
		{context.DeadlineExceeded, false, true},
		{readTimeout, false, true},
	} {
		b := Breaker{Threshold: 1, Cooldown: time.Hour, Starved: func() bool { return c.starved }}
		b.Record(c.err, nil)
		if got := b.Open(); got != c.counts {
			t.Errorf("%v, starved %v: breaker open %v; want %v", c.err, c.starved, got, c.counts)
		}
	}
}

// TestQuietForCountsUncountedTimeouts: a timeout of a starved process is
// no verdict, yet Redis may have failed the call: QuietFor is not quiet
// after it (the reserve is not emptied on a Redis that fails calls the
// breaker does not count). A call its caller left, or one Redis answered
// with an error about the call, leaves it quiet.
func TestQuietForCountsUncountedTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := Breaker{Threshold: 3, Cooldown: time.Second, Settle: time.Second, Starved: func() bool { return true }}
		if quiet, ok := b.QuietFor(); !ok || quiet < time.Hour {
			t.Fatalf("a new breaker is quiet for %v (%v); want a long time", quiet, ok)
		}
		b.Record(context.DeadlineExceeded, nil)
		time.Sleep(10 * time.Millisecond)
		if quiet, ok := b.QuietFor(); b.Failing() || !ok || quiet != 10*time.Millisecond {
			t.Errorf("10ms after a starved timeout: failing %v, quiet for %v (%v); want not failing, quiet for 10ms", b.Failing(), quiet, ok)
		}
		time.Sleep(time.Second)
		b.Record(context.DeadlineExceeded, context.Canceled) // the caller left
		b.Record(proto("WRONGTYPE Operation against a key holding the wrong kind of value"), nil)
		if quiet, ok := b.QuietFor(); !ok || quiet != time.Second+10*time.Millisecond {
			t.Errorf("after a left call and an error about the call: quiet for %v (%v); want since the timeout", quiet, ok)
		}
	})
}

func TestTimeout(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{os.ErrDeadlineExceeded, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{context.Canceled, false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{proto("BUSY Redis is busy running a script."), false},
		{redis.ErrClosed, false},
	} {
		if got := Timeout(c.err); got != c.want {
			t.Errorf("Timeout(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestBreakerSeveralServers: with Silence, failures between the answers of
// other servers keep the breaker closed, and it opens once no call
// succeeded for Silence; with Settle, Recovered waits for a success Settle
// after the last failure.
func TestBreakerSeveralServers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		recovered := 0
		b := &Breaker{Threshold: 3, Cooldown: time.Second, Silence: time.Second, Settle: time.Second,
			Recovered: func() bool { recovered++; return true }}
		// One server down among answering ones: its failures come in
		// bursts between the others' answers.
		for range 5 {
			b.Success()
			for range 10 {
				b.Failure()
			}
			if b.Open() {
				t.Fatal("the breaker opened while another server answered within Silence")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !b.Failing() {
			t.Fatal("failures in a row, the breaker does not say failing")
		}
		if recovered != 0 {
			t.Fatalf("Recovered called %d times while a server kept failing", recovered)
		}
		// Every server down: no answer for Silence, then the failures open it.
		time.Sleep(time.Second)
		for range 3 {
			b.Failure()
		}
		if !b.Open() {
			t.Fatal("no answer for Silence and three failures: the breaker stayed closed")
		}
		// Back, a cooldown after the last failure: the probe's success
		// closes it and is the recovery.
		time.Sleep(time.Second)
		probe, ok := b.Allow()
		if !ok {
			t.Fatal("no probe after the cooldown")
		}
		b.Success()
		b.Release(probe)
		if b.Open() || recovered != 1 {
			t.Fatalf("after the probe's success: open %v, Recovered %d times; want closed, recovered once", b.Open(), recovered)
		}
		b.Success()
		if recovered != 1 {
			t.Fatalf("Recovered %d times with no failure between, want 1", recovered)
		}
	})
}

// TestBreakerRecoveredDeclined: a Recovered that declines (it waits for
// something else, such as a master a failover is replacing) stays owed: a
// later success calls it again, and no success within recoverRetry of the
// decline does, so a fleet of successes does not run it at each one. With
// Settle, it is also called again Settle after the decline with no
// success at all (a recovered Redis may be called by nobody), and again
// each Settle while it declines.
func TestBreakerRecoveredDeclined(t *testing.T) {
	for _, settle := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprint("settle=", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				var accept atomic.Bool
				b := &Breaker{Threshold: 3, Cooldown: time.Second, Settle: settle,
					Recovered: func() bool { calls.Add(1); return accept.Load() }}
				b.Failure()
				time.Sleep(settle)
				b.Success()
				if n := calls.Load(); n != 1 {
					t.Fatalf("Recovered called %d times after failures and a success, want 1", n)
				}
				for range 10 {
					b.Success()
				}
				if n := calls.Load(); n != 1 {
					t.Fatalf("Recovered called %d times at successes right after it declined, want 1", n)
				}
				time.Sleep(max(recoverRetry, settle))
				synctest.Wait()
				want := int32(1)
				if settle > 0 {
					want = 2 // owed, by the timer
				}
				if n := calls.Load(); n != want {
					t.Fatalf("Recovered called %d times, no success since it declined %v ago; want %d", n, max(recoverRetry, settle), want)
				}
				accept.Store(true)
				if settle == 0 {
					b.Success()
				} else {
					time.Sleep(settle)
					synctest.Wait()
				}
				want++
				if n := calls.Load(); n != want {
					t.Fatalf("Recovered called %d times, want %d: it declined, and a later success (or Settle) came", n, want)
				}
				time.Sleep(time.Minute)
				b.Success()
				synctest.Wait()
				if n := calls.Load(); n != want {
					t.Fatalf("Recovered called %d times after it accepted, with no failure between; want %d", n, want)
				}
			})
		})
	}
}

// TestSettleRecoversWithoutASuccess: with Settle, a success that comes too
// soon after the last failure leaves Recovered owed; it is called once
// Settle has passed since that failure, though no call succeeds then (a
// recovered Redis whose calls an in-process tier answers, or none comes).
// A failure in between puts it off; Shut cancels it.
func TestSettleRecoversWithoutASuccess(t *testing.T) {
	const settle = time.Second
	t.Run("alone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var recovered atomic.Int32
			b := &Breaker{Threshold: 5, Cooldown: time.Second, Settle: settle, Recovered: func() bool { recovered.Add(1); return true }}
			b.Failure()
			if _, ok := b.QuietFor(); ok {
				t.Fatal("QuietFor ok after a failure; want not while failing")
			}
			time.Sleep(100 * time.Millisecond)
			b.Success()
			synctest.Wait()
			if quiet, ok := b.QuietFor(); recovered.Load() != 0 || !ok || quiet != 100*time.Millisecond {
				t.Fatalf("Recovered called %d times 100ms after the failure (quiet for %v, %v); want 0, quiet for 100ms", recovered.Load(), quiet, ok)
			}
			time.Sleep(settle)
			synctest.Wait()
			if quiet, ok := b.QuietFor(); recovered.Load() != 1 || !ok || quiet < settle {
				t.Fatalf("Recovered called %d times Settle after the failure (quiet for %v, %v); want once, quiet for Settle", recovered.Load(), quiet, ok)
			}
		})
	})
	t.Run("failed-again", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var recovered atomic.Int32
			b := &Breaker{Threshold: 5, Cooldown: time.Second, Settle: settle, Recovered: func() bool { recovered.Add(1); return true }}
			b.Failure()
			b.Success()
			time.Sleep(settle / 2)
			b.Failure()
			b.Success()
			time.Sleep(settle/2 + time.Millisecond)
			synctest.Wait()
			if recovered.Load() != 0 {
				t.Fatalf("Recovered called %d times %v after a failure; want 0", recovered.Load(), settle/2)
			}
			time.Sleep(settle / 2)
			synctest.Wait()
			if recovered.Load() != 1 {
				t.Fatalf("Recovered called %d times Settle after the last failure; want once", recovered.Load())
			}
		})
	})
	t.Run("shut", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var recovered atomic.Int32
			b := &Breaker{Threshold: 5, Cooldown: time.Second, Settle: settle, Recovered: func() bool { recovered.Add(1); return true }}
			b.Failure()
			b.Success()
			b.Shut()
			time.Sleep(2 * settle)
			synctest.Wait()
			if recovered.Load() != 0 {
				t.Fatalf("Recovered called %d times after Shut; want 0", recovered.Load())
			}
		})
	})
}

// TestAnsweredSince: a success at or after t is an answer since t; a
// failure, an uncounted timeout or a success before t is none; without
// Settle or Silence successes are not timed.
func TestAnsweredSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Breaker{Threshold: 3, Cooldown: time.Second, Settle: time.Second}
		start := time.Now()
		if b.AnsweredSince(start) {
			t.Fatal("answered with no call")
		}
		b.Success()
		time.Sleep(time.Millisecond)
		since := time.Now()
		if !b.AnsweredSince(start) || b.AnsweredSince(since) {
			t.Fatalf("a success before since: answered since start %v (want true), since since %v (want false)",
				b.AnsweredSince(start), b.AnsweredSince(since))
		}
		b.Record(context.DeadlineExceeded, nil)
		b.Failure()
		if b.AnsweredSince(since) {
			t.Fatal("a timeout and a failure counted as an answer")
		}
		b.Record(nil, nil)
		if !b.AnsweredSince(since) {
			t.Fatal("a success after since is no answer")
		}
		untimed := &Breaker{Threshold: 3, Cooldown: time.Second}
		untimed.Success()
		if untimed.AnsweredSince(start) {
			t.Fatal("a breaker without Settle or Silence timed a success")
		}
	})
}

// TestBreakerTripRefused: Refused tells an ACL refusal (NOPERM, or a
// command refused inside a script) from every other error, and Trip opens
// the breaker at once, whatever its count, telling the hook once; a shut
// breaker stays shut.
func TestBreakerTripRefused(t *testing.T) {
	for _, c := range []struct {
		err     error
		refused bool
	}{
		{proto("NOPERM this user has no permissions to run the 'strlen' command"), true},
		{proto("ERR The user executing the script can't run this command or subcommand script: 71, on @user_script:11."), true},
		{proto("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{proto("LOADING Redis is loading the dataset in memory"), false},
		{context.DeadlineExceeded, false},
		{nil, false},
	} {
		if got := Refused(c.err); got != c.refused {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.refused)
		}
	}
	var opened int
	b := Breaker{Threshold: 5, Cooldown: time.Hour, Hook: func(open bool) {
		if open {
			opened++
		}
	}}
	b.Trip()
	b.Trip()
	if !b.Open() || opened != 1 {
		t.Errorf("after Trip: open %v, hook told open %d times; want open, once", b.Open(), opened)
	}
	s := Breaker{Threshold: 1, Cooldown: time.Hour}
	s.Shut()
	s.Trip()
	if s.Open() {
		t.Error("a shut breaker opened on Trip")
	}
}
