package guard_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// A product page shows 40 products. The first view loads the 40 rows in one
// origin call (one query with WHERE id IN (...)); the next views are served
// from Redis in one round trip. A product the origin does not have is left
// out of the result, and cached as missing.
func ExampleFetchMany() {
	rdb, stop := newRedis()
	defer stop()
	// The embedded Redis of the examples runs its Lua in Go, slowly: a
	// generous RedisTimeout. Against a real Redis keep the default.
	g, err := guard.New(rdb, guard.Options{RedisTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	type Product struct {
		ID    int
		Name  string
		Price int
	}
	var queries, rows atomic.Int64
	// loadProducts is the origin: one query for all the ids it is given.
	loadProducts := func(ctx context.Context, ids []int) (map[int]Product, error) {
		queries.Add(1)
		out := make(map[int]Product, len(ids))
		for _, id := range ids {
			rows.Add(1)
			if id == 13 {
				continue // discontinued: not in the catalogue
			}
			out[id] = Product{ID: id, Name: "product " + strconv.Itoa(id), Price: 100 + id}
		}
		return out, nil
	}
	productKey := func(id int) string { return "product:" + strconv.Itoa(id) }

	page := make([]int, 40)
	for i := range page {
		page[i] = i + 1
	}
	for view := 1; view <= 3; view++ {
		products, err := guard.FetchMany(context.Background(), g, page, productKey, loadProducts)
		if err != nil {
			panic(err)
		}
		_, has13 := products[13]
		fmt.Printf("view %d: %d products (13 shown: %v), %s costs %d; origin: %d queries, %d rows\n",
			view, len(products), has13, products[7].Name, products[7].Price, queries.Load(), rows.Load())
	}
	// Output:
	// view 1: 39 products (13 shown: false), product 7 costs 107; origin: 1 queries, 40 rows
	// view 2: 39 products (13 shown: false), product 7 costs 107; origin: 1 queries, 40 rows
	// view 3: 39 products (13 shown: false), product 7 costs 107; origin: 1 queries, 40 rows
}

// GetMany is the []byte form: keys in, the values found out.
func ExampleGroup_GetMany() {
	rdb, stop := newRedis()
	defer stop()
	g, _ := guard.New(rdb, guard.Options{RedisTimeout: 5 * time.Second}) // see ExampleFetchMany
	defer g.Close()

	load := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			out[k] = []byte("<li>" + k + "</li>")
		}
		return out, nil
	}
	vals, err := g.GetMany(context.Background(), []string{"user:1", "user:2", "user:1"}, load)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(vals), string(vals["user:2"]))
	// Output: 2 <li>user:2</li>
}
