package guard_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// A loader whose origin can say "unchanged since version X" keeps its value
// past freshness for revalidation, reads the version from Previous and
// answers Revalidated: the value is stored fresh again and its bytes do not
// travel to Redis a second time.
func ExampleRevalidated() {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer mr.Close()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	mr.SetTime(now) // the Redis clock the guard judges freshness by
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	g, _ := guard.New(rdb, guard.Options{})
	defer g.Close()

	const version = "v7"
	report := func(ctx context.Context) ([]byte, error) {
		_ = guard.SetWindows(ctx, guard.Windows{Fresh: time.Minute, Stale: time.Hour, MustRevalidate: true})
		if prev, ok := guard.Previous(ctx); ok {
			have, _, _ := bytes.Cut(prev, []byte("|"))
			fmt.Printf("origin: changed since %s? no\n", have)
			return nil, guard.Revalidated(nil, 0) // keep it all
		}
		fmt.Println("origin: full report")
		return []byte(version + "|the monthly report"), nil
	}
	r, _ := g.Do(context.Background(), "report:11", report)
	fmt.Printf("%s: %s\n", r.Status, r.Value)

	// Two minutes later another instance asks: the report is past its
	// freshness, so it is not served stale; it is revalidated.
	mr.SetTime(now.Add(2 * time.Minute))
	mr.FastForward(2 * time.Minute)
	other, _ := guard.New(rdb, guard.Options{})
	defer other.Close()
	r, _ = other.Do(context.Background(), "report:11", report)
	fmt.Printf("%s: %s (fresh for %v)\n", r.Status, r.Value, r.Fresh)
	// Output:
	// origin: full report
	// miss: v7|the monthly report
	// origin: changed since v7? no
	// miss: v7|the monthly report (fresh for 1m0s)
}
