package guard

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestNamespacesAreApart: two Groups on one Redis, with different
// Namespaces (two services), use the same key for different values of
// different types. Neither ever sees the other's entry: each loads its
// own, is served its own, and an Invalidate in one leaves the other's
// entry in place. Their names in Redis share nothing.
func TestNamespacesAreApart(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := ctxT(t)
		base := strings.ReplaceAll(redistest.Key(t), "/", ":") + ":"
		catalog := newGroup(t, rdb, Options{Namespace: base + "catalog:"})
		billing := newGroup(t, rdb, Options{Namespace: base + "billing:"})
		const key = "user:42" // the same key in both services

		// []byte values: each Group loads its own.
		var catalogLoads, billingLoads int
		loadCatalog := func(context.Context) ([]byte, error) { catalogLoads++; return []byte("catalog's user 42"), nil }
		loadBilling := func(context.Context) ([]byte, error) { billingLoads++; return []byte("billing's user 42"), nil }
		do := func(g *Group, load LoadFunc, wantStatus Status, want string) {
			t.Helper()
			r, err := g.Do(ctx, key, load)
			if err != nil {
				t.Fatalf("%s Do: %v", g.opts.Namespace, err)
			}
			if r.Status != wantStatus || string(r.Value) != want {
				t.Fatalf("%s Do = %v %q, want %v %q", g.opts.Namespace, r.Status, r.Value, wantStatus, want)
			}
		}
		do(catalog, loadCatalog, Miss, "catalog's user 42")
		do(billing, loadBilling, Miss, "billing's user 42") // not catalog's entry
		do(catalog, loadCatalog, Hit, "catalog's user 42")
		do(billing, loadBilling, Hit, "billing's user 42")
		if catalogLoads != 1 || billingLoads != 1 {
			t.Fatalf("loads: catalog %d, billing %d, want 1 each", catalogLoads, billingLoads)
		}

		// Typed values under one key: a struct in one service, a list in
		// the other. Reading the other's JSON would fail to decode.
		type product struct {
			SKU   string
			Price int
		}
		p, err := Fetch(ctx, catalog, "typed", func(context.Context) (product, error) { return product{"A1", 1299}, nil })
		if err != nil || p != (product{"A1", 1299}) {
			t.Fatalf("catalog Fetch = %+v, %v", p, err)
		}
		tags, err := Fetch(ctx, billing, "typed", func(context.Context) ([]string, error) { return []string{"vat", "eu"}, nil })
		if err != nil || !slices.Equal(tags, []string{"vat", "eu"}) {
			t.Fatalf("billing Fetch = %q, %v", tags, err)
		}
		notCalled := func(what string) func(context.Context) (product, error) {
			return func(context.Context) (product, error) {
				t.Errorf("%s loaded again: its entry was not found", what)
				return product{}, nil
			}
		}
		if p, err := Fetch(ctx, catalog, "typed", notCalled("catalog")); err != nil || p != (product{"A1", 1299}) {
			t.Fatalf("catalog Fetch again = %+v, %v", p, err)
		}

		// Invalidate in one service leaves the other's entry.
		if err := catalog.Invalidate(ctx, key); err != nil {
			t.Fatal(err)
		}
		do(billing, loadBilling, Hit, "billing's user 42")
		do(catalog, loadCatalog, Miss, "catalog's user 42")
		if catalogLoads != 2 || billingLoads != 1 {
			t.Fatalf("after catalog's Invalidate, loads: catalog %d, billing %d, want 2 and 1", catalogLoads, billingLoads)
		}
		if err := billing.Invalidate(ctx, "typed"); err != nil {
			t.Fatal(err)
		}
		if p, err := Fetch(ctx, catalog, "typed", notCalled("catalog")); err != nil || p != (product{"A1", 1299}) {
			t.Fatalf("catalog Fetch after billing's Invalidate = %+v, %v", p, err)
		}

		// In Redis: every name either Group made starts with its own
		// Namespace; each made some.
		var all []string
		var mu sync.Mutex
		scan := func(ctx context.Context, c *redis.Client) error {
			it := c.Scan(ctx, 0, base+"*", 100).Iterator()
			for it.Next(ctx) {
				mu.Lock()
				all = append(all, it.Val())
				mu.Unlock()
			}
			return it.Err()
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, scan)
		} else {
			err = scan(ctx, rdb.(*redis.Client))
		}
		if err != nil {
			t.Fatal(err)
		}
		per := map[*Group]int{}
		for _, n := range all {
			switch {
			case strings.HasPrefix(n, catalog.opts.Namespace):
				per[catalog]++
			case strings.HasPrefix(n, billing.opts.Namespace):
				per[billing]++
			default:
				t.Errorf("name %q is in neither Namespace", n)
			}
		}
		if per[catalog] == 0 || per[billing] == 0 {
			t.Errorf("names in Redis %q: want some of each Group", all)
		}
	})
}
