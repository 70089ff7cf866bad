package guard

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkDialClosedGroups is a PING that dials (ConnMaxLifetime of a
// nanosecond) on a client that closed Groups were made on: each left its
// dial hook on the client (go-redis removes none), which the dial passes
// through. groups=0 is the bare client.
func BenchmarkDialClosedGroups(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run("groups="+strconv.Itoa(n), func(b *testing.B) {
			rdb := redistest.Shared(b).Client(b, func(o *redis.Options) { o.ConnMaxLifetime = time.Nanosecond })
			makeAndClose(b, rdb, n)
			runtime.GC() // the closed Groups' tiers go; their hooks stay
			ctx := context.Background()
			for b.Loop() {
				if err := rdb.Ping(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
