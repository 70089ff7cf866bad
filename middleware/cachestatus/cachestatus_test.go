package cachestatus

import (
	"strings"
	"testing"

	"github.com/stampede-go/stampede/guard"
)

// TestOf: every guard status maps to a distinct RFC 9211 value naming the
// cache, and an unknown status reads as a plain miss.
func TestOf(t *testing.T) {
	seen := map[string]guard.Status{}
	for _, s := range []guard.Status{guard.Hit, guard.Stale, guard.Miss, guard.Shared, guard.Degraded} {
		v := Of(s)
		if !strings.HasPrefix(v, "stampede; ") {
			t.Errorf("Of(%v) = %q: not a Cache-Status member for stampede", s, v)
		}
		if prev, dup := seen[v]; dup {
			t.Errorf("Of(%v) = Of(%v) = %q", s, prev, v)
		}
		seen[v] = s
	}
	if got := Of(guard.Status(0)); got != Miss {
		t.Errorf("Of(0) = %q, want %q", got, Miss)
	}
}
