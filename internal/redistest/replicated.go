package redistest

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated waits up to timeout for n replicas of the master rdb writes to
// to acknowledge every write that master applied so far, and returns how
// many did. WAIT counts the acknowledgements of its own connection's
// writes only (a connection that wrote nothing is acknowledged at once),
// so it writes marker first, and sends both on one connection; the
// replication stream is ordered, so a replica that applied the marker
// applied every earlier write. marker is a key of the caller's (on a
// cluster node, one of that node's slots).
func Replicated(ctx context.Context, rdb redis.UniversalClient, marker string, n int, timeout time.Duration) (int, error) {
	var wait *redis.Cmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, marker)
		wait = p.Do(ctx, "WAIT", n, timeout.Milliseconds())
		return nil
	})
	if err != nil {
		return 0, err
	}
	return wait.Int()
}
