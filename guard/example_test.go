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

// A loader that learns how long its value lives only once it has it: an
// OAuth token is cached for its expires_in, less a margin, and never served
// stale.
func ExampleSetWindows() {
	rdb, stop := newRedis()
	defer stop()
	g, _ := guard.New(rdb, guard.Options{})
	defer g.Close()

	type token struct {
		Access    string
		ExpiresIn int // seconds, as the authorisation server says
	}
	fetchToken := func(ctx context.Context) (token, error) {
		t := token{Access: "eyJhbGciOi...", ExpiresIn: 3600} // the token endpoint's answer
		err := guard.SetWindows(ctx, guard.Windows{
			Fresh: time.Duration(t.ExpiresIn)*time.Second - time.Minute,
			Stale: guard.Disabled, // an expired token is of no use
		})
		return t, err
	}
	for range 2 {
		t, err := guard.Fetch(context.Background(), g, "oauth:token", fetchToken)
		if err != nil {
			panic(err)
		}
		fmt.Println(t.Access)
	}
	ttl := rdb.PTTL(context.Background(), "stampede:{oauth:token}").Val()
	fmt.Println("kept for", ttl.Round(time.Minute))
	// Output:
	// eyJhbGciOi...
	// eyJhbGciOi...
	// kept for 59m0s
}
