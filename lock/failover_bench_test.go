package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lock"
)

// BenchmarkSentinelObtain measures what an acquisition acknowledged by
// replicas would cost (see docs/failover.md): Obtain and Release of an
// uncontended lock on a Sentinel-managed master with two replicas, plain,
// and with WAIT n (the lease acknowledged by n replicas) between them, as
// an Obtain that waited for replicas would do. One op is one acquisition.
// The "pipelined" runs are the least such an Obtain could cost: SET NX PX
// and WAIT sent together in one round trip, then the release.
func BenchmarkSentinelObtain(b *testing.B) {
	st := redistest.StartSentinel(b, redistest.SentinelOptions{})
	rdb := st.FailoverClient(b)
	c := lock.New(rdb, lock.Options{})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	for _, replicas := range []int{0, 1, 2} {
		name := "plain"
		if replicas > 0 {
			name = "WAIT" + strconv.Itoa(replicas)
		}
		b.Run(name, func(b *testing.B) {
			key := redistest.Key(b)
			for b.Loop() {
				l, err := c.Obtain(ctx, key, 10e9)
				if err != nil {
					b.Fatal(err)
				}
				if replicas > 0 {
					// WAIT counts its own connection's writes: a marker
					// write first, on the same connection.
					if n, err := redistest.Replicated(ctx, rdb, key+":wait", replicas, time.Second); err != nil || n < replicas {
						b.Fatalf("WAIT %d = %d, %v", replicas, n, err)
					}
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSentinelSetWaitPipelined(b *testing.B) {
	st := redistest.StartSentinel(b, redistest.SentinelOptions{})
	rdb := st.FailoverClient(b)
	ctx := context.Background()
	for _, replicas := range []int{0, 1, 2} {
		b.Run("WAIT"+strconv.Itoa(replicas), func(b *testing.B) {
			key := redistest.Key(b)
			for b.Loop() {
				cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.SetNX(ctx, key, "token", 10e9)
					if replicas > 0 {
						p.Do(ctx, "WAIT", replicas, 1000)
					}
					return nil
				})
				if err != nil || !cmds[0].(*redis.BoolCmd).Val() {
					b.Fatalf("SET NX: %v", err)
				}
				if replicas > 0 {
					if n, _ := cmds[1].(*redis.Cmd).Int(); n < replicas {
						b.Fatalf("WAIT %d = %d", replicas, n)
					}
				}
				if err := rdb.Del(ctx, key).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
