package guard

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkHit is one fresh hit against a real Redis (1 round trip).
func BenchmarkHit(b *testing.B) {
	rdb := redistest.Shared(b).Client(b)
	g, err := New(rdb, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return make([]byte, 256), nil }
	key := redistest.Key(b)
	if _, err := g.Do(ctx, key, load); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := g.Do(ctx, key, load); err != nil || r.Status != Hit {
			b.Fatal(r.Status, err)
		}
	}
}

// BenchmarkHitCallerDeadline is a hit whose caller's deadline is nearer
// than RedisTimeout would be: the guard adds no timeout of its own, so the
// hit allocates what a bare go-redis GET does. (RedisTimeout is an hour
// here only so that the caller's deadline, 10 minutes, outlasts the loop.)
func BenchmarkHitCallerDeadline(b *testing.B) {
	rdb := redistest.Shared(b).Client(b)
	g, err := New(rdb, Options{RedisTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	load := func(context.Context) ([]byte, error) { return make([]byte, 256), nil }
	key := redistest.Key(b)
	if _, err := g.Do(context.Background(), key, load); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if r, err := g.Do(ctx, key, load); err != nil || r.Status != Hit {
			b.Fatal(r.Status, err)
		}
	}
}

// BenchmarkHitSize is BenchmarkHit with the value sizes of the HTTP
// middleware's hit benchmark, for comparing the two side by side:
//
//	go test -run '^$' -bench 'HitSize' -benchmem ./guard
//	go test -run '^$' -bench 'Hit' -benchmem ./middleware/nethttp
func BenchmarkHitSize(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"100KB", 100 << 10}} {
		b.Run(size.name, func(b *testing.B) {
			rdb := redistest.Shared(b).Client(b)
			g, err := New(rdb, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			ctx := context.Background()
			load := func(context.Context) ([]byte, error) { return make([]byte, size.n), nil }
			key := redistest.Key(b)
			if _, err := g.Do(ctx, key, load); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size.n))
			b.ReportAllocs()
			for b.Loop() {
				if r, err := g.Do(ctx, key, load); err != nil || r.Status != Hit {
					b.Fatal(r.Status, err)
				}
			}
		})
	}
}

// BenchmarkHitLocalParallel is a hit from the in-process tier by 64
// goroutines at once, over 64 keys (the tier's hit under contention).
func BenchmarkHitLocalParallel(b *testing.B) {
	rdb := redistest.Shared(b).Client(b)
	g, err := New(rdb, Options{Namespace: redistest.Key(b) + ":", FreshFor: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return make([]byte, 256), nil }
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = redistest.Key(b) + strconv.Itoa(i)
		for range 2 {
			if _, err := g.Do(ctx, keys[i], load); err != nil {
				b.Fatal(err)
			}
		}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		key := keys[next.Add(1)%int64(len(keys))]
		for pb.Next() {
			if _, err := g.Do(ctx, key, load); err != nil {
				b.Fatal(err)
			}
		}
	})
}
