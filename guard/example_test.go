package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// newRedis starts an embedded Redis for the examples; use your own client.
func newRedis() (*redis.Client, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		panic(err)
	}
	// ContextTimeoutEnabled lets guard.Options.RedisTimeout bound each call.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

func ExampleGroup_Do() {
	rdb, stop := newRedis()
	defer stop()
	g, err := guard.New(rdb, guard.Options{FreshFor: time.Minute})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	load := func(ctx context.Context) ([]byte, error) {
		return []byte("row 42 from the database"), nil
	}
	for range 2 {
		r, err := g.Do(context.Background(), "row:42", load)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s\n", r.Status, r.Value)
	}
	// Output:
	// miss: row 42 from the database
	// hit: row 42 from the database
}

func ExampleFetch() {
	rdb, stop := newRedis()
	defer stop()
	g, _ := guard.New(rdb, guard.Options{})
	defer g.Close()

	type Product struct {
		SKU   string
		Price int
	}
	p, err := guard.Fetch(context.Background(), g, "product:A1", func(ctx context.Context) (Product, error) {
		return Product{SKU: "A1", Price: 1299}, nil
	})
	fmt.Println(p, err)
	// Output: {A1 1299} <nil>
}

func ExampleWrap() {
	rdb, stop := newRedis()
	defer stop()
	g, _ := guard.New(rdb, guard.Options{})
	defer g.Close()

	queries := 0
	price := guard.Wrap(g,
		func(sku string) string { return "price:" + sku },
		func(ctx context.Context, sku string) (int, error) {
			queries++
			return 1299, nil
		})
	for range 3 {
		v, _ := price(context.Background(), "A1")
		fmt.Println(v)
	}
	fmt.Println("database queries:", queries)
	// Output:
	// 1299
	// 1299
	// 1299
	// database queries: 1
}

func ExampleErrNotFound() {
	rdb, stop := newRedis()
	defer stop()
	g, _ := guard.New(rdb, guard.Options{NegativeFor: 30 * time.Second})
	defer g.Close()

	lookups := 0
	load := func(ctx context.Context) ([]byte, error) {
		lookups++
		return nil, guard.ErrNotFound // cached for NegativeFor
	}
	for range 3 {
		_, err := g.Get(context.Background(), "user:missing", load)
		fmt.Println(errors.Is(err, guard.ErrNotFound))
	}
	fmt.Println("lookups:", lookups)
	// Output:
	// true
	// true
	// true
	// lookups: 1
}
