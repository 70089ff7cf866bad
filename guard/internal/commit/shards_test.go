package commit

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestShards: on a cluster client each master's names share one queue and
// no two masters share one; on any other client, and for queues that do
// not batch, every name gets Any.
func TestShards(t *testing.T) {
	ctx := context.Background()
	made := 0
	mk := func(*redis.Client) *int { made++; q := made; return &q }

	one := NewShards(redistest.Start(t).Client(t), true, mk)
	for i := range 10 {
		if q := one.For(ctx, strconv.Itoa(i)); q != one.Any {
			t.Fatalf("a standalone client's name %d got queue %d, want Any", i, *q)
		}
	}

	cl := redistest.StartCluster(t, redistest.ClusterOptions{})
	alone := NewShards(cl.Client(t), false, mk)
	for i := range 10 {
		if q := alone.For(ctx, strconv.Itoa(i)); q != alone.Any {
			t.Fatalf("a cluster's name %d got queue %d with batching off, want Any", i, *q)
		}
	}
	s := NewShards(cl.Client(t), true, mk)
	byMaster := map[*redistest.Server]*int{}
	for i := range 64 {
		name := redistest.Key(t, strconv.Itoa(i))
		q, m := s.For(ctx, name), cl.MasterFor(t, name)
		if s.For(ctx, name) != q {
			t.Fatalf("%s: two queues for one name", name)
		}
		if prev, ok := byMaster[m]; ok && prev != q {
			t.Fatalf("%s: master %s has queues %d and %d", name, m.Addr, *prev, *q)
		}
		byMaster[m] = q
	}
	seen := map[*int]bool{}
	for m, q := range byMaster {
		if seen[q] {
			t.Fatalf("master %s shares queue %d with another master", m.Addr, *q)
		}
		seen[q] = true
	}
	visited := 0
	s.Each(func(*int) { visited++ })
	if len(byMaster) != len(cl.Masters) || visited != len(cl.Masters)+1 {
		t.Fatalf("%d masters met, Each visited %d queues; want %d masters and them plus Any", len(byMaster), visited, len(cl.Masters))
	}
}
