package chaos

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// soakSentinel is the soak on a master with two replicas behind three
// Sentinels, each node on its own failover client. Its faults fail the
// master over, or may: the master killed (a replica is promoted, and the
// killed node rejoins as a replica with its data lost), a manual failover
// (SENTINEL FAILOVER: the master is demoted), the master frozen (past
// down-after-milliseconds, 1s, the Sentinels promote a replica and the old
// master, thawed, is demoted), or pausing its clients (the Sentinels' too).
// A fault ends once the Sentinels agree on a master and every other node
// is its replica again.
//
// The invariants are the soak's, with one allowance written in
// docs/failover.md: a stored version may go back in a failover window
// (the fills the promoted replica had not received are lost), counted
// apart; outside those windows it may not, so a fill fenced before a
// failover that lands after it over a newer one is caught.
func soakSentinel(t *testing.T) {
	st := redistest.StartSentinel(t, redistest.SentinelOptions{})
	admin := st.FailoverClient(t)
	var epoch atomic.Int64
	var failovers atomic.Int64
	env := &soakEnv{
		admin: admin,
		epoch: epoch.Load,
		figures: func() string {
			return fmt.Sprintf("failovers %d", failovers.Load())
		},
		// Closed with the nodes, so that its Sentinel subscription ends
		// before the goroutine check.
		closeLinks: func() { _ = admin.Close() },
		leakOK: []goleak.Option{
			// The reaper of a node restarted during the soak (Rejoin): it
			// ends with the node, at the test's cleanup.
			goleak.IgnoreAnyFunction("github.com/stampede-go/stampede/internal/redistest.(*Server).launch.func1"),
		},
	}
	env.inject = func(rng *rand.Rand) (string, func()) {
		epoch.Add(1) // odd: a failover may happen from now on
		before := st.Master(t)
		end := func() {
			if st.Master(t) != before {
				failovers.Add(1)
			}
			epoch.Add(1)
		}
		switch rng.IntN(4) {
		case 0:
			killed, _ := st.KillMaster(t)
			return "master killed", func() { st.Rejoin(t, killed); end() }
		case 1:
			st.Failover(t)
			return "failover", func() { st.WaitHealthy(t); end() }
		case 2:
			before.Freeze(t)
			return "master frozen", func() { before.Thaw(t); st.WaitHealthy(t); end() }
		default:
			direct := before.Client(t)
			ms := 300 + rng.IntN(1200)
			if err := direct.Do(ctxT(t, 5*time.Second), "CLIENT", "PAUSE", fmt.Sprint(ms), "ALL").Err(); err != nil {
				t.Errorf("CLIENT PAUSE: %v", err)
			}
			return "master pauses clients", func() {
				redistest.Eventually(t, 10*time.Second, "the pause to end", func() bool {
					return direct.Ping(ctxT(t, time.Second)).Err() == nil
				})
				_ = direct.Close()
				st.WaitHealthy(t)
				end()
			}
		}
	}
	soak(t, env, func(i int, opts guard.Options) *node {
		rdb := st.FailoverClient(t, func(o *redis.FailoverOptions) {
			o.MaxRetries = -1
			o.DialTimeout = redisTimeout
			o.PoolSize = 16
		})
		return &node{name: fmt.Sprint("n", i), rdb: rdb, g: newGroup(t, rdb, opts)}
	})
}
