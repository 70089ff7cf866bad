package guard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/stampede-go/stampede/guard"
)

func ExampleGroup_Inspect() {
	rdb, stop := newRedis()
	defer stop()
	g, err := guard.New(rdb, guard.Options{FreshFor: time.Minute, StaleFor: 5 * time.Minute})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	ctx := context.Background()
	_, _ = g.Get(ctx, "row:42", func(context.Context) ([]byte, error) { return []byte("row 42"), nil })

	ki, err := g.Inspect(ctx, "row:42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s under %s: %s, %d bytes, lease held: %v\n", ki.Key, ki.Entry, ki.State, ki.Size, ki.LeaseFence != 0)
	fmt.Println("stale for", (ki.StaleLeft - ki.FreshLeft).Round(time.Second), "after its fresh window")
	// Output:
	// row:42 under stampede:{row:42}: fresh, 6 bytes, lease held: false
	// stale for 5m0s after its fresh window
}
