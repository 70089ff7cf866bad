package guard

import (
	"context"
	"testing"

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
