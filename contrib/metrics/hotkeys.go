package metrics

import (
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/stampede-go/stampede/guard"
)

// HotKeys keeps the last window of a Group's hottest keys
// (guard.Hooks.HotKeys) for an adapter to export when it is collected:
// Labels.HotKeys of each kind at most, so the series stay bounded. It is
// safe for concurrent use.
type HotKeys struct {
	n    int
	last atomic.Pointer[guard.HotKeys]
}

// maxHotKeyLabel bounds a hot key's label value, in bytes.
const maxHotKeyLabel = 100

// NewHotKeys returns the HotKeys of l (its defaults filled in).
func NewHotKeys(l Labels) *HotKeys {
	return &HotKeys{n: max(l.WithDefaults().HotKeys, 0)}
}

// On reports whether any hot key is exported.
func (h *HotKeys) On() bool { return h.n > 0 }

// Hook is guard.Hooks.HotKeys.
func (h *HotKeys) Hook(hk guard.HotKeys) { h.last.Store(&hk) }

// Each calls f for each key of the last window: by "calls" or "loads",
// its rank from "1", the key as a label value (valid UTF-8, cut to 100
// bytes) and its rate per second.
func (h *HotKeys) Each(f func(by, rank, key string, perSecond float64)) {
	hk := h.last.Load()
	if hk == nil {
		return
	}
	for _, kind := range []struct {
		by   string
		keys []guard.HotKey
	}{{"calls", hk.Calls}, {"loads", hk.Loads}} {
		for i, k := range kind.keys[:min(len(kind.keys), h.n)] {
			f(kind.by, strconv.Itoa(i+1), hotLabel(k.Key), k.PerSecond)
		}
	}
}

// hotLabel is key made a short, valid label value: made valid first, as
// each invalid byte grows to a 3-byte U+FFFD, then cut to maxHotKeyLabel
// bytes at a character's boundary.
func hotLabel(key string) string {
	key = Valid(key)
	if len(key) > maxHotKeyLabel {
		cut := maxHotKeyLabel
		for cut > 0 && !utf8.RuneStart(key[cut]) {
			cut--
		}
		key = key[:cut]
	}
	return key
}
