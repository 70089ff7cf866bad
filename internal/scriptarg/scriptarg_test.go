package scriptarg

import (
	"encoding/base64"
	"testing"
	"time"
)

func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {time.Nanosecond, 1}, {999 * time.Microsecond, 1}, {time.Millisecond, 1},
		{1500 * time.Microsecond, 1}, {2 * time.Second, 2000}, {-time.Second, -1000},
	} {
		if got := Millis(c.d); got != c.want {
			t.Errorf("Millis(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestRandomID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := RandomID(12)
		b, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil || len(b) != 12 {
			t.Fatalf("RandomID(12) = %q (%v)", id, err)
		}
		if seen[id] {
			t.Fatalf("RandomID repeated %q", id)
		}
		seen[id] = true
	}
}

func TestToken(t *testing.T) {
	a, b := Token(), Token()
	if len(a) != 22 || a == b {
		t.Fatalf("Token() = %q, %q", a, b)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(a); err != nil || len(raw) != 16 {
		t.Fatalf("Token() = %q (%v)", a, err)
	}
}

// BenchmarkToken: one allocation, the string returned (without -race).
func BenchmarkToken(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Token()
	}
}
