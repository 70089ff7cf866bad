package lock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestOddKeyBytes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		c := newTestClient(t, rdb, Options{})
		for _, k := range []string{"}", "{", "{}", "a}b{c", "\x00\xff", "%7D", strings.Repeat("}{", 1000)} {
			key := redistest.Key(t) + k
			l, err := c.Obtain(ctxT(t), key, time.Minute)
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			if _, err := c.Obtain(ctxT(t), key, time.Minute); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("key %q not exclusive: %v", key, err)
			}
			if err := l.Release(ctxT(t)); err != nil {
				t.Fatalf("key %q release: %v", key, err)
			}
		}
		// Keys that differ only in escaped bytes stay distinct locks.
		l1, err := c.Obtain(ctxT(t), redistest.Key(t)+"}", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l1.Release(context.Background())
		l2, err := c.Obtain(ctxT(t), redistest.Key(t)+"%7D", time.Minute)
		if err != nil {
			t.Fatalf("distinct key collided: %v", err)
		}
		defer l2.Release(context.Background())
	})
}

func TestClusterNamesShareSlot(t *testing.T) {
	cl := redistest.SharedCluster(t)
	rdb := cl.Client(t)
	c := newTestClient(t, rdb, Options{})
	for _, k := range []string{"plain", "}", "{", "{}", "}x{y}", "\x00"} {
		nm := c.names(k)
		var slots []int64
		for _, name := range []string{nm.lock, nm.fence(), nm.queue} {
			s, err := rdb.ClusterKeySlot(ctxT(t), name).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, s)
		}
		for _, s := range slots[1:] {
			if s != slots[0] {
				t.Fatalf("key %q: names land in slots %v", k, slots)
			}
		}
	}
}
