package stampedeprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/contrib/metrics"
	stampedeprom "github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/guard"
)

func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer mr.Close()
	// ContextTimeoutEnabled lets guard.Options.RedisTimeout bound each call.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	m := stampedeprom.New(stampedeprom.Options{Labels: metrics.Labels{Group: "products"}})
	reg.MustRegister(m)

	g, err := guard.New(rdb, guard.Options{Hooks: m.GuardHooks()})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	load := func(ctx context.Context) ([]byte, error) { return []byte("row 42"), nil }
	for range 2 {
		if _, err := g.Get(context.Background(), "product:42", load); err != nil {
			panic(err)
		}
	}

	// The lines a scrape shows for these two metrics.
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain,
		"stampede_requests_total", "stampede_loads_total")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "#") {
			fmt.Print(line)
		}
	}
	// Output:
	// stampede_loads_total{group="products",key="",result="error"} 0
	// stampede_loads_total{group="products",key="",result="not_found"} 0
	// stampede_loads_total{group="products",key="",result="ok"} 1
	// stampede_loads_total{group="products",key="",result="pass"} 0
	// stampede_loads_total{group="products",key="",result="revalidated"} 0
	// stampede_requests_total{group="products",key="",status="hit"} 1
	// stampede_requests_total{group="products",key="",status="hit_local"} 0
	// stampede_requests_total{group="products",key="",status="miss"} 1
	// stampede_requests_total{group="products",key="",status="stale"} 0
}
