package stampede_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

type Product struct {
	SKU   string
	Price int
}

// The first example of the package documentation, on an embedded Redis:
// the second call is served from Redis, without a load.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	g, err := guard.New(rdb, guard.Options{
		Namespace: "catalog:",
		FreshFor:  time.Minute,
		StaleFor:  5 * time.Minute,
	})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	ctx := context.Background()
	loads := 0
	load := func(ctx context.Context) (Product, error) {
		loads++
		return Product{SKU: "42", Price: 1299}, nil
	}
	for range 2 {
		p, err := guard.Fetch(ctx, g, "product:42", load)
		fmt.Println(p, err)
	}
	fmt.Println("loads:", loads)
	// Output:
	// {42 1299} <nil>
	// {42 1299} <nil>
	// loads: 1
}
