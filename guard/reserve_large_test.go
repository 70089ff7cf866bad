package guard

import (
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/tier"
)

// TestReserveLargeValuesBounded: values over an eighth of the reserve's
// bytes are kept apart, and within its bytes still: 16 values of 4 MiB in
// a reserve of 1 MiB keep nothing (the first version of the shelf kept
// 64 MiB).
func TestReserveLargeValuesBounded(t *testing.T) {
	const bound = 1 << 20
	r := tier.NewReserve(100, bound)
	now := time.Now()
	for i := range 16 {
		k := fmt.Sprint("k", i)
		r.PutSince(tier.Kept{Key: k, Name: "n" + k, Value: make([]byte, 4<<20), FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}, now)
	}
	kept := 0
	for i := range 16 {
		if v, ok := r.Get(fmt.Sprint("k", i)); ok {
			kept += len(v.Value)
		}
	}
	if kept > bound {
		t.Errorf("a reserve bounded to %d bytes keeps %d bytes of values", bound, kept)
	}
}
