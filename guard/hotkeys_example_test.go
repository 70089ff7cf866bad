package guard_test

import (
	"fmt"

	"github.com/stampede-go/stampede/guard"
)

func ExampleGroup_HotKeys() {
	rdb, stop := newRedis()
	defer stop()
	g, err := guard.New(rdb, guard.Options{
		// Each window's hottest keys, every 5s: to a log, a metric...
		Hooks: guard.Hooks{HotKeys: func(hk guard.HotKeys) {
			if len(hk.Calls) > 0 {
				fmt.Printf("hottest: %s at %.0f calls/s\n", hk.Calls[0].Key, hk.Calls[0].PerSecond)
			}
		}},
	})
	if err != nil {
		panic(err)
	}
	defer g.Close()
	// Between windows, the last one's (empty until the first ends).
	fmt.Println(len(g.HotKeys().Calls), "hot keys yet")
	// Output:
	// 0 hot keys yet
}
