package guard

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// farFresh is a fresh_until far ahead of any Redis clock (2100-01-01), so the
// corrupt entries below would count as fresh if a parser accepted them.
const farFresh = "4102444800000"

// corruptEntries are values decodeEntry must reject; scriptsdata_test.go
// checks that the scripts treat each of them as missing too.
var corruptEntries = []struct {
	name, raw, why string
}{
	{"empty", "", "no header"},
	{"garbage", "garbage", "no header"},
	{"tilde only", "~", "no header"},
	{"no comma", "~1", "no header"},
	{"version 2", "~2," + farFresh + "," + farFresh + ",0,0,1,\nx", "version"},
	{"version 10", "~10," + farFresh + "," + farFresh + ",0,0,1,\nx", "version"},
	{"uppercase tag", "~V," + farFresh + ",\n", "version"},
	{"no newline", "~1," + farFresh + "," + farFresh + ",0,0,1,", "no newline"},
	{"magic only", "~1,", "no newline"},
	{"empty header", "~1,\n", "fresh_until: empty"},
	{"one field", "~1," + farFresh + "\n", "header ends after fresh_until"},
	{"five fields", "~1," + farFresh + "," + farFresh + ",0,0,1\nx", "header ends after fence"},
	{"missing fence", "~1," + farFresh + "," + farFresh + ",0,0,,\nx", "fence: empty"},
	{"missing stale", "~1," + farFresh + ",,0,0,1,\nx", "stale_until: empty"},
	{"minus", "~1,-5," + farFresh + ",0,0,1,\n", "fresh_until: not a digit"},
	{"plus", "~1,+5," + farFresh + ",0,0,1,\n", "fresh_until: not a digit"},
	{"space", "~1, " + farFresh + "," + farFresh + ",0,0,1,\n", "fresh_until: not a digit"},
	{"trailing space", "~1," + farFresh + " ," + farFresh + ",0,0,1,\n", "unexpected byte"},
	{"hex", "~1,0x10," + farFresh + ",0,0,1,\n", "unexpected byte"},
	{"letter in number", "~1," + farFresh + "," + farFresh + ",0,0,1a,\n", "fence: unexpected byte"},
	{"non-ascii digit", "~1," + farFresh + "," + farFresh + ",0,0,\u0661,\n", "fence: not a digit"},
	{"leading zero", "~1,0" + farFresh + "," + farFresh + ",0,0,1,\n", "leading zero"},
	{"double zero", "~1," + farFresh + "," + farFresh + ",00,0,1,\n", "written: leading zero"},
	{"20 digits", "~1," + farFresh + "," + farFresh + ",0,0,10000000000000000000,\n", "fence: overflows"},
	{"int64 overflow", "~1," + farFresh + "," + farFresh + ",0,0,9223372036854775808,\n", "fence: overflows"},
	{"stale overflow", "~1," + farFresh + ",9223372036854775808,0,0,1,\n", "stale_until: overflows"},
	{"load_us overflows a duration", "~1," + farFresh + "," + farFresh + ",0,9223372036854776,1,\n", "load_us"},
	{"stale before fresh", "~1," + farFresh + ",4102444799999,0,0,1,\n", "stale_until"},
	{"unknown flag", "~1," + farFresh + "," + farFresh + ",0,0,1,x\nv", "bad flags"},
	{"uppercase flag", "~1," + farFresh + "," + farFresh + ",0,0,1,N\n", "bad flags"},
	{"both flags", "~1," + farFresh + "," + farFresh + ",0,0,1,ne\n", "bad flags"},
	{"duplicate flag", "~1," + farFresh + "," + farFresh + ",0,0,1,ee\nboom", "bad flags"},
	{"extra comma", "~1," + farFresh + "," + farFresh + ",0,0,1,,\nv", "bad flags"},
	{"extra field", "~1," + farFresh + "," + farFresh + ",0,0,1,2,\nv", "bad flags"},
	{"carriage return", "~1," + farFresh + "," + farFresh + ",0,0,1,\r\nv", "bad flags"},
	{"negative with payload", "~1," + farFresh + "," + farFresh + ",0,0,1,n\nx", "negative entry with a 1-byte payload"},
	{"oversize marker with payload", "~1," + farFresh + "," + farFresh + ",0,0,1,o\nx", "oversize marker with a 1-byte payload"},
	{"oversize and negative", "~1," + farFresh + "," + farFresh + ",0,0,1,no\n", "bad flags"},
	{"long header", "~1," + strings.Repeat("1", 200) + "," + farFresh + ",0,0,1,\n", "header longer than 128"},
	{"long header no newline", "~1," + farFresh + "," + farFresh + ",0,0,1," + strings.Repeat("x", 200), "header longer than 128"},
}

func TestDecodeEntryCorrupt(t *testing.T) {
	for _, c := range corruptEntries {
		t.Run(c.name, func(t *testing.T) {
			e, err := decodeEntry([]byte(c.raw))
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("decodeEntry(%q) = %+v, %v; want errCorrupt", c.raw, e, err)
			}
			if !strings.Contains(err.Error(), c.why) {
				t.Errorf("decodeEntry(%q): error %q lacks %q", c.raw, err, c.why)
			}
			if !strings.HasPrefix(err.Error(), errCorrupt.Error()+": ") {
				t.Errorf("error %q does not start with %q", err, errCorrupt)
			}
		})
	}
}

func TestDecodeEntry(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want entry
	}{
		{
			"~1,1700000000000,1700000060000,1699999990000,2500,1700000000000123,\nvalue",
			entry{freshUntil: 1700000000000, staleUntil: 1700000060000, written: 1699999990000,
				loadDur: 2500 * time.Microsecond, fence: 1700000000000123, value: []byte("value")},
		},
		{"~1,0,0,0,0,0,\n", entry{value: []byte{}}},
		{"~1,5,5,5,0,1,n\n", entry{freshUntil: 5, staleUntil: 5, written: 5, fence: 1, negative: true, value: []byte{}}},
		{"~1,5,9,5,1,2,e\nboom", entry{freshUntil: 5, staleUntil: 9, written: 5, loadDur: time.Microsecond, fence: 2, errMark: true, value: []byte("boom")}},
		{"~1,5,9,5,1,2,r\nkept", entry{freshUntil: 5, staleUntil: 9, written: 5, loadDur: time.Microsecond, fence: 2, mustRevalidate: true, value: []byte("kept")}},
		{"~1,5,9,5,1,2,o\n", entry{freshUntil: 5, staleUntil: 9, written: 5, loadDur: time.Microsecond, fence: 2, oversize: true, value: []byte{}}},
		{ // the payload may hold anything, even a header
			"~1,1,2,3,4,5,\n~1,6,7,8,9,10,\n\x00\xff",
			entry{freshUntil: 1, staleUntil: 2, written: 3, loadDur: 4 * time.Microsecond, fence: 5, value: []byte("~1,6,7,8,9,10,\n\x00\xff")},
		},
		{
			"~1,9223372036854775807,9223372036854775807,9223372036854775807,9223372036854775,9223372036854775807,\n",
			entry{freshUntil: math.MaxInt64, staleUntil: math.MaxInt64, written: math.MaxInt64,
				loadDur: time.Duration(maxLoadMicros) * time.Microsecond, fence: math.MaxInt64, value: []byte{}},
		},
	} {
		got, err := decodeEntry([]byte(c.raw))
		if err != nil {
			t.Errorf("decodeEntry(%q): %v", c.raw, err)
			continue
		}
		if !entriesEqual(got, c.want) {
			t.Errorf("decodeEntry(%q) = %+v, want %+v", c.raw, got, c.want)
		}
		if enc := encodeEntry(got); string(enc) != c.raw {
			t.Errorf("encodeEntry(decodeEntry(%q)) = %q", c.raw, enc)
		}
	}
}

// TestDecodeHeaderAtLimit checks the 128-byte bound is on the header with
// its newline: 128 decodes, 129 does not.
func TestDecodeHeaderAtLimit(t *testing.T) {
	longest := encodeEntry(entry{freshUntil: math.MaxInt64, staleUntil: math.MaxInt64, written: math.MaxInt64,
		loadDur: time.Duration(maxLoadMicros) * time.Microsecond, fence: math.MaxInt64, errMark: true})
	if len(longest) > maxHeaderLen {
		t.Fatalf("longest valid header is %d bytes, over the %d bound", len(longest), maxHeaderLen)
	}
	if _, err := decodeEntry(longest); err != nil {
		t.Fatal(err)
	}
	// withNewlineAt returns a header whose newline is at index i: a valid
	// start, then flags (wrong ones) filling the rest.
	withNewlineAt := func(i int) []byte {
		const start = "~1,1,1,1,1,1,"
		return []byte(start + strings.Repeat("x", i-len(start)) + "\n")
	}
	// At index 128 the header is 129 bytes: too long.
	if _, err := decodeEntry(withNewlineAt(maxHeaderLen)); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("newline at index %d: %v, want header too long", maxHeaderLen, err)
	}
	// At index 127 it is within the bound, and the flags are what is wrong.
	if _, err := decodeEntry(withNewlineAt(maxHeaderLen - 1)); err == nil || !strings.Contains(err.Error(), "bad flags") {
		t.Errorf("newline at index %d: %v, want bad flags", maxHeaderLen-1, err)
	}
}

func TestEncodeEntry(t *testing.T) {
	got := encodeEntry(entry{freshUntil: 100, staleUntil: 200, written: 50, loadDur: 1500*time.Microsecond + 999, fence: 7, value: []byte("hello")})
	if want := "~1,100,200,50,1500,7,\nhello"; string(got) != want {
		t.Errorf("encodeEntry = %q, want %q", got, want)
	}
	got = encodeEntry(entry{freshUntil: -1, staleUntil: -1, written: -1, loadDur: -time.Second, fence: -1, negative: true})
	if want := "~1,0,0,0,0,0,n\n"; string(got) != want {
		t.Errorf("encodeEntry(negative numbers) = %q, want %q", got, want)
	}
	got = encodeEntry(entry{loadDur: math.MaxInt64, errMark: true, value: []byte("boom")})
	if want := "~1,0,0,0,9223372036854775,0,e\nboom"; string(got) != want {
		t.Errorf("encodeEntry(huge duration) = %q, want %q", got, want)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []entry{
		{},
		{freshUntil: 1700000001000, staleUntil: 1700000061000, written: 1700000000000, loadDur: 12345 * time.Microsecond, fence: 1700000000000000, value: []byte(`{"a":1}`)},
		{freshUntil: 10, staleUntil: 10, written: 10, fence: 3, negative: true},
		{freshUntil: 10, staleUntil: 20, written: 9, fence: 3, errMark: true, value: []byte("load failed: boom\n")},
		{freshUntil: math.MaxInt64, staleUntil: math.MaxInt64, written: math.MaxInt64, fence: math.MaxInt64, value: bytes.Repeat([]byte{0, '\n', 0xff}, 1000)},
	} {
		got, err := decodeEntry(encodeEntry(e))
		if err != nil {
			t.Errorf("decodeEntry(encodeEntry(%+v)): %v", e, err)
			continue
		}
		if !entriesEqual(got, e) {
			t.Errorf("round trip of %+v = %+v", e, got)
		}
	}
}

// TestDecodeEntryAliases checks the value is not copied: it shares the
// input's memory.
func TestDecodeEntryAliases(t *testing.T) {
	b := encodeEntry(entry{freshUntil: 1, staleUntil: 2, value: []byte("payload")})
	e, err := decodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if &e.value[0] != &b[len(b)-len("payload")] {
		t.Fatal("value does not alias the input")
	}
	b[len(b)-1] = 'D'
	if string(e.value) != "payloaD" {
		t.Fatalf("value = %q after changing the input", e.value)
	}
}

func TestDecodeEntryAllocs(t *testing.T) {
	for _, e := range []entry{
		{freshUntil: 1700000001000, staleUntil: 1700000061000, written: 1700000000000, loadDur: 12 * time.Millisecond, fence: 1700000000000000, value: bytes.Repeat([]byte("v"), 4096)},
		{freshUntil: 1700000001000, staleUntil: 1700000001000, written: 1700000000000, fence: 1700000000000000, negative: true},
		{freshUntil: 1700000001000, staleUntil: 1700000001000, written: 1700000000000, fence: 1700000000000000, errMark: true, value: []byte("boom")},
	} {
		b := encodeEntry(e)
		var err error
		allocs := testing.AllocsPerRun(1000, func() { _, err = decodeEntry(b) })
		if err != nil {
			t.Fatal(err)
		}
		if allocs != 0 {
			t.Errorf("decodeEntry(%q...) allocates %v times per run, want 0", b[:20], allocs)
		}
	}
}

func BenchmarkDecodeEntry(b *testing.B) {
	raw := encodeEntry(entry{freshUntil: 1700000001000, staleUntil: 1700000061000, written: 1700000000000,
		loadDur: 12 * time.Millisecond, fence: 1700000000000000, value: bytes.Repeat([]byte("v"), 1024)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeEntry(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, c := range corruptEntries {
		f.Add([]byte(c.raw))
	}
	for _, s := range []string{
		"~1,0,0,0,0,0,\n",
		"~1,5,5,5,0,1,n\n",
		"~1,5,9,5,1,2,e\nboom",
		"~1,5,9,5,1,2,o\n",
		"~1,1700000000000,1700000060000,1699999990000,2500,1700000000000123,\nvalue",
		"~1,9223372036854775807,9223372036854775807,9223372036854775807,9223372036854775,9223372036854775807,\n",
		"~1,1,2,3,4,5,\n~1,6,7,8,9,10,\n\x00\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("decodeEntry(%q): error %v does not wrap errCorrupt", b, err)
			}
			return
		}
		if len(e.value) > 0 && &e.value[0] != &b[len(b)-len(e.value)] {
			t.Fatalf("decodeEntry(%q): value does not alias the input's tail", b)
		}
		if e.staleUntil < e.freshUntil || e.negative && (e.errMark || len(e.value) > 0) || e.oversize && len(e.value) > 0 {
			t.Fatalf("decodeEntry(%q) = %+v breaks an invariant", b, e)
		}
		enc := encodeEntry(e)
		got, err := decodeEntry(enc)
		if err != nil {
			t.Fatalf("decodeEntry(encodeEntry(decodeEntry(%q))) = %q: %v", b, enc, err)
		}
		if !entriesEqual(got, e) {
			t.Fatalf("round trip of %q: %+v, then %+v", b, e, got)
		}
		// The format is canonical: what decodes was written exactly so.
		if !bytes.Equal(enc, b) {
			t.Fatalf("decodeEntry accepted %q, which encodes back as %q", b, enc)
		}
	})
}

func entriesEqual(a, b entry) bool {
	return a.freshUntil == b.freshUntil && a.staleUntil == b.staleUntil && a.written == b.written &&
		a.loadDur == b.loadDur && a.fence == b.fence && a.negative == b.negative && a.errMark == b.errMark &&
		a.mustRevalidate == b.mustRevalidate && a.oversize == b.oversize && bytes.Equal(a.value, b.value)
}
