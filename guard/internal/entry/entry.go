package entry

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// A cache entry is one Redis string, so a hit is one GET-class round trip:
// an ASCII header line, then the payload.
//
//	"~1," fresh_until "," stale_until "," written "," load_us "," fence "," flags "\n" payload
//
// "~1" is the format version. The numbers are decimal, non-negative, without
// sign or leading zeros, and fit an int64: fresh_until, stale_until and
// written are Redis server milliseconds since the epoch (from TIME), load_us
// is the duration of the load that produced the entry in microseconds (for
// early refresh) and fence the fencing number of the writer. stale_until is
// not before fresh_until, and the Redis TTL of the key ends at stale_until.
// flags is "" for a value, "n" for a negative entry (the loader said not
// found; the payload is empty), "e" for an error marker (a cold key's load
// failed; the payload is the error text and the entry lives only for the
// back-off), "r" for a value that is never served stale: between
// fresh_until and stale_until it is only kept for the next load to
// revalidate (Windows.MustRevalidate), "f" for a failing marker (no
// payload: the key's loads fail for their own callers, who take turns,
// see Private), "p" for a pass marker (no payload: until fresh_until each
// call runs its own load, see Pass) or "o" for an oversize marker (a value
// over Options.MaxValueBytes was loaded: the payload is empty, and each
// node keeps its own copy; see Options.MaxValueBytes). Anything else is corrupt:
// formats evolve through the version, not through unknown flags. The
// header, newline included, is at most MaxHeaderLen bytes.
//
// The scripts guard_read.lua and guard_fill.lua write and parse this format
// with the same rules; the scripts-data tests hold them to it.

// ErrCorrupt is wrapped by every error of decodeEntry.
var ErrCorrupt = errors.New("guard: corrupt cache entry")

const (
	entryMagic   = "~1,"
	MaxHeaderLen = 128
	// MaxLoadMicros is the largest load_us whose time.Duration fits an int64.
	MaxLoadMicros = math.MaxInt64 / int64(time.Microsecond)
)

// Entry is a decoded cache Entry.
type Entry struct {
	FreshUntil int64 // Redis ms: fresh before this
	StaleUntil int64 // Redis ms: servable as stale before this; the key's TTL ends here
	Written    int64 // Redis ms when the entry was written
	LoadDur    time.Duration
	Fence      int64 // fencing number of the writer
	Negative   bool  // flag 'n': the loader said not found
	ErrMark    bool  // flag 'e': value is the error text of a failed load
	// flag 'r': a value never served stale; past fresh_until it is kept
	// only to be revalidated by the next load (Windows.MustRevalidate).
	MustRevalidate bool
	// flag 'f': no value; the key's loads are Failing for their own
	// callers (Private), who take turns under the lease.
	Failing bool
	// flag 'p': no value; until fresh_until each call runs its own load
	// (Pass).
	Pass bool
	// flag 'o': a value over MaxValueBytes, not stored; value is empty
	// until a node's own copy is put in its place.
	Oversize bool
	Value    []byte
}

// Marker reports an entry that holds no value: failing or pass.
func (e *Entry) Marker() bool { return e.Failing || e.Pass }

// entryFields names the numeric header fields in order, for error details.
var entryFields = [...]string{"fresh_until", "stale_until", "written", "load_us", "fence"}

// Decode decodes b strictly. Every error wraps errCorrupt. It never
// panics, and the value of the result aliases b (nothing is copied), so b
// must not be modified while the entry is in use.
func Decode(b []byte) (Entry, error) {
	var e Entry
	if len(b) < len(entryMagic) || string(b[:len(entryMagic)]) != entryMagic {
		return e, corruptf("unsupported version or no header (starts %q)", b[:min(len(b), 8)])
	}
	end := bytes.IndexByte(b[:min(len(b), MaxHeaderLen)], '\n')
	if end < 0 {
		if len(b) > MaxHeaderLen {
			return e, corruptf("header longer than %d bytes", MaxHeaderLen)
		}
		return e, corruptf("header has no newline")
	}
	h := b[len(entryMagic):end]
	var nums [len(entryFields)]int64
	for i := range nums {
		n, k, why := parseDecimal(h)
		switch {
		case why != "":
			return e, corruptf("%s: %s", entryFields[i], why)
		case k == len(h):
			return e, corruptf("header ends after %s", entryFields[i])
		case h[k] != ',':
			return e, corruptf("%s: unexpected byte %q", entryFields[i], h[k])
		}
		nums[i], h = n, h[k+1:]
	}
	e.FreshUntil, e.StaleUntil, e.Written, e.Fence = nums[0], nums[1], nums[2], nums[4]
	if e.StaleUntil < e.FreshUntil {
		return e, corruptf("stale_until %d before fresh_until %d", e.StaleUntil, e.FreshUntil)
	}
	if nums[3] > MaxLoadMicros {
		return e, corruptf("load_us %d overflows a duration", nums[3])
	}
	e.LoadDur = time.Duration(nums[3]) * time.Microsecond
	e.Value = b[end+1:]
	switch string(h) {
	case "":
	case "n":
		if len(e.Value) != 0 {
			return Entry{}, corruptf("negative entry with a %d-byte payload", len(e.Value))
		}
		e.Negative = true
	case "e":
		e.ErrMark = true
	case "r":
		e.MustRevalidate = true
	case "f", "p":
		if len(e.Value) != 0 {
			return Entry{}, corruptf("%s marker with a %d-byte payload", h, len(e.Value))
		}
		e.Failing, e.Pass = string(h) == "f", string(h) == "p"
	case "o":
		if len(e.Value) != 0 {
			return Entry{}, corruptf("oversize marker with a %d-byte payload", len(e.Value))
		}
		e.Oversize = true
	default:
		return Entry{}, corruptf("bad flags %q", h)
	}
	return e, nil
}

// parseDecimal reads the canonical decimal number at the start of b: one or
// more ASCII digits, no leading zero, at most math.MaxInt64. It returns the
// number and how many bytes it took, or why there is no such number.
func parseDecimal(b []byte) (n int64, k int, why string) {
	for k < len(b) && '0' <= b[k] && b[k] <= '9' {
		d := int64(b[k] - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, 0, "overflows int64"
		}
		n = n*10 + d
		k++
	}
	switch {
	case k == 0 && k < len(b) && b[0] != ',':
		return 0, 0, fmt.Sprintf("not a digit: %q", b[0])
	case k == 0:
		return 0, 0, "empty"
	case k > 1 && b[0] == '0':
		return 0, 0, "leading zero"
	}
	return n, k, ""
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Encode encodes e in format v1. Negative numbers are written as 0 and
// loadDur is truncated to microseconds (at most MaxLoadMicros); the caller
// keeps staleUntil >= freshUntil, sets at most one of negative, errMark,
// mustRevalidate and oversize, and leaves value empty when negative or
// oversize, or the result does not decode.
func Encode(e Entry) []byte {
	b := make([]byte, 0, len(entryMagic)+5*20+2+len(e.Value))
	b = append(b, entryMagic...)
	us := min(max(int64(e.LoadDur/time.Microsecond), 0), MaxLoadMicros)
	for _, n := range [...]int64{e.FreshUntil, e.StaleUntil, e.Written, us, e.Fence} {
		b = strconv.AppendInt(b, max(n, 0), 10)
		b = append(b, ',')
	}
	if e.Negative {
		b = append(b, 'n')
	}
	if e.ErrMark {
		b = append(b, 'e')
	}
	if e.MustRevalidate {
		b = append(b, 'r')
	}
	if e.Failing {
		b = append(b, 'f')
	}
	if e.Pass {
		b = append(b, 'p')

	}
	if e.Oversize {
		b = append(b, 'o')
	}
	b = append(b, '\n')
	return append(b, e.Value...)
}
