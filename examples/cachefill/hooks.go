package main

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// hookCounts is what the guard's Hooks reported across all nodes of a run:
// the numbers an operator would put on a dashboard.
type hookCounts struct {
	loads, loadErrors             atomic.Int64
	leasesWon, leasesBusy         atomic.Int64
	wokenByFill, wokenByTimer     atomic.Int64
	coalesced, refreshErrors      atomic.Int64
	fillsRejected, redisErrors    atomic.Int64
	breakerOpened, corruptEntries atomic.Int64
	tierOff                       atomic.Int64 // nodes whose in-process tier could not listen
}

func (c *hookCounts) hooks() guard.Hooks {
	return guard.Hooks{
		Load: func(_ string, _ time.Duration, err error) {
			c.loads.Add(1)
			if err != nil {
				c.loadErrors.Add(1)
			}
		},
		Lease: func(_ string, won bool) {
			if won {
				c.leasesWon.Add(1)
			} else {
				c.leasesBusy.Add(1)
			}
		},
		Woken: func(_ string, notified bool, _ time.Duration) {
			if notified {
				c.wokenByFill.Add(1)
			} else {
				c.wokenByTimer.Add(1)
			}
		},
		Coalesced:    func(string) { c.coalesced.Add(1) },
		RefreshError: func(string, error) { c.refreshErrors.Add(1) },
		FillRejected: func(string) { c.fillsRejected.Add(1) },
		RedisError: func(op string, _ error) {
			if op == "track" {
				// The in-process tier's listener was refused (embedded
				// miniredis has no client tracking): that node's tier
				// stays off and every hit reads Redis. Not an outage.
				c.tierOff.Add(1)
				return
			}
			c.redisErrors.Add(1)
		},
		Breaker: func(open bool) {
			if open {
				c.breakerOpened.Add(1)
			}
		},
		Corrupt: func(string, error) { c.corruptEntries.Add(1) },
	}
}

func (c *hookCounts) String() string {
	tier := ""
	if n := c.tierOff.Load(); n > 0 {
		tier = fmt.Sprintf("; in-process tier off on %d nodes (the server has no client tracking)", n)
	}
	return fmt.Sprintf("loads %d (errors %d), leases won %d / found busy %d, waiters woken by the fill %d / by their timer %d, "+
		"callers coalesced in-process %d, refresh errors %d, fills rejected by the fence %d, Redis errors %d, breaker opened %d, corrupt entries %d",
		c.loads.Load(), c.loadErrors.Load(), c.leasesWon.Load(), c.leasesBusy.Load(),
		c.wokenByFill.Load(), c.wokenByTimer.Load(), c.coalesced.Load(), c.refreshErrors.Load(),
		c.fillsRejected.Load(), c.redisErrors.Load(), c.breakerOpened.Load(), c.corruptEntries.Load()) + tier
}
