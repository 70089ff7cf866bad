package metrics

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stampede-go/stampede/guard"
)

// TestHotKeys: at most HotKeys of each kind, ranked from 1, keys made
// short valid label values; none when negative.
func TestHotKeys(t *testing.T) {
	hk := guard.HotKeys{Calls: []guard.HotKey{{Key: "a", PerSecond: 30}, {Key: "b", PerSecond: 20}, {Key: "c", PerSecond: 10}},
		Loads: []guard.HotKey{{Key: strings.Repeat("é", 80) + "\xff", PerSecond: 1}}}
	h := NewHotKeys(Labels{HotKeys: 2})
	h.Hook(hk)
	var got []string
	h.Each(func(by, rank, key string, r float64) {
		if !utf8.ValidString(key) || len(key) > maxHotKeyLabel {
			t.Errorf("label %q: not a short valid label", key)
		}
		got = append(got, fmt.Sprintf("%s %s %.20s %v", by, rank, key, r))
	})
	want := []string{"calls 1 a 30", "calls 2 b 20", "loads 1 " + strings.Repeat("é", 20) + " 1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Each: %q, want %q", got, want)
	}
	if !NewHotKeys(Labels{}).On() || NewHotKeys(Labels{HotKeys: -1}).On() {
		t.Error("On: want true by default, false when negative")
	}
	off := NewHotKeys(Labels{HotKeys: -1})
	off.Hook(hk)
	off.Each(func(by, rank, key string, r float64) { t.Errorf("off: got %s %s", by, key) })
}

// TestHotKeyLabelCutAfterCleaning: a key of invalid bytes is made valid
// before it is cut, so its label stays within 100 bytes although each
// invalid byte becomes a 3-byte U+FFFD.
func TestHotKeyLabelCutAfterCleaning(t *testing.T) {
	key := strings.Repeat("a\xff", 60) // 120 bytes, 180 once made valid
	h := NewHotKeys(Labels{})
	h.Hook(guard.HotKeys{Calls: []guard.HotKey{{Key: key, PerSecond: 1}}})
	n := 0
	h.Each(func(_, _, label string, _ float64) {
		n++
		if !utf8.ValidString(label) || len(label) > maxHotKeyLabel {
			t.Errorf("label of %d bytes (valid: %v), want valid UTF-8 of at most %d bytes", len(label), utf8.ValidString(label), maxHotKeyLabel)
		}
		if want := strings.Repeat("a\uFFFD", 25); label != want {
			t.Errorf("label %q, want %q", label, want)
		}
	})
	if n != 1 {
		t.Errorf("%d labels, want 1", n)
	}
}
