package entry

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDecodeEntryCorrupt(t *testing.T) {
	for _, c := range Corrupt {
		t.Run(c.Name, func(t *testing.T) {
			e, err := Decode([]byte(c.Raw))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeEntry(%q) = %+v, %v; want errCorrupt", c.Raw, e, err)
			}
			if !strings.Contains(err.Error(), c.Why) {
				t.Errorf("decodeEntry(%q): error %q lacks %q", c.Raw, err, c.Why)
			}
			if !strings.HasPrefix(err.Error(), ErrCorrupt.Error()+": ") {
				t.Errorf("error %q does not start with %q", err, ErrCorrupt)
			}
		})
	}
}

func TestDecodeEntry(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want Entry
	}{
		{
			"~1,1700000000000,1700000060000,1699999990000,2500,1700000000000123,\nvalue",
			Entry{FreshUntil: 1700000000000, StaleUntil: 1700000060000, Written: 1699999990000,
				LoadDur: 2500 * time.Microsecond, Fence: 1700000000000123, Value: []byte("value")},
		},
		{"~1,0,0,0,0,0,\n", Entry{Value: []byte{}}},
		{"~1,5,5,5,0,1,n\n", Entry{FreshUntil: 5, StaleUntil: 5, Written: 5, Fence: 1, Negative: true, Value: []byte{}}},
		{"~1,5,9,5,1,2,e\nboom", Entry{FreshUntil: 5, StaleUntil: 9, Written: 5, LoadDur: time.Microsecond, Fence: 2, ErrMark: true, Value: []byte("boom")}},
		{"~1,5,9,5,1,2,r\nkept", Entry{FreshUntil: 5, StaleUntil: 9, Written: 5, LoadDur: time.Microsecond, Fence: 2, MustRevalidate: true, Value: []byte("kept")}},
		{"~1,5,9,5,1,2,o\n", Entry{FreshUntil: 5, StaleUntil: 9, Written: 5, LoadDur: time.Microsecond, Fence: 2, Oversize: true, Value: []byte{}}},
		{ // the payload may hold anything, even a header
			"~1,1,2,3,4,5,\n~1,6,7,8,9,10,\n\x00\xff",
			Entry{FreshUntil: 1, StaleUntil: 2, Written: 3, LoadDur: 4 * time.Microsecond, Fence: 5, Value: []byte("~1,6,7,8,9,10,\n\x00\xff")},
		},
		{
			"~1,9223372036854775807,9223372036854775807,9223372036854775807,9223372036854775,9223372036854775807,\n",
			Entry{FreshUntil: math.MaxInt64, StaleUntil: math.MaxInt64, Written: math.MaxInt64,
				LoadDur: time.Duration(MaxLoadMicros) * time.Microsecond, Fence: math.MaxInt64, Value: []byte{}},
		},
	} {
		got, err := Decode([]byte(c.raw))
		if err != nil {
			t.Errorf("decodeEntry(%q): %v", c.raw, err)
			continue
		}
		if !Equal(got, c.want) {
			t.Errorf("decodeEntry(%q) = %+v, want %+v", c.raw, got, c.want)
		}
		if enc := Encode(got); string(enc) != c.raw {
			t.Errorf("encodeEntry(decodeEntry(%q)) = %q", c.raw, enc)
		}
	}
}

// TestDecodeHeaderAtLimit checks the 128-byte bound is on the header with
// its newline: 128 decodes, 129 does not.
func TestDecodeHeaderAtLimit(t *testing.T) {
	longest := Encode(Entry{FreshUntil: math.MaxInt64, StaleUntil: math.MaxInt64, Written: math.MaxInt64,
		LoadDur: time.Duration(MaxLoadMicros) * time.Microsecond, Fence: math.MaxInt64, ErrMark: true})
	if len(longest) > MaxHeaderLen {
		t.Fatalf("longest valid header is %d bytes, over the %d bound", len(longest), MaxHeaderLen)
	}
	if _, err := Decode(longest); err != nil {
		t.Fatal(err)
	}
	// withNewlineAt returns a header whose newline is at index i: a valid
	// start, then flags (wrong ones) filling the rest.
	withNewlineAt := func(i int) []byte {
		const start = "~1,1,1,1,1,1,"
		return []byte(start + strings.Repeat("x", i-len(start)) + "\n")
	}
	// At index 128 the header is 129 bytes: too long.
	if _, err := Decode(withNewlineAt(MaxHeaderLen)); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("newline at index %d: %v, want header too long", MaxHeaderLen, err)
	}
	// At index 127 it is within the bound, and the flags are what is wrong.
	if _, err := Decode(withNewlineAt(MaxHeaderLen - 1)); err == nil || !strings.Contains(err.Error(), "bad flags") {
		t.Errorf("newline at index %d: %v, want bad flags", MaxHeaderLen-1, err)
	}
}

func TestEncodeEntry(t *testing.T) {
	got := Encode(Entry{FreshUntil: 100, StaleUntil: 200, Written: 50, LoadDur: 1500*time.Microsecond + 999, Fence: 7, Value: []byte("hello")})
	if want := "~1,100,200,50,1500,7,\nhello"; string(got) != want {
		t.Errorf("encodeEntry = %q, want %q", got, want)
	}
	got = Encode(Entry{FreshUntil: -1, StaleUntil: -1, Written: -1, LoadDur: -time.Second, Fence: -1, Negative: true})
	if want := "~1,0,0,0,0,0,n\n"; string(got) != want {
		t.Errorf("encodeEntry(negative numbers) = %q, want %q", got, want)
	}
	got = Encode(Entry{LoadDur: math.MaxInt64, ErrMark: true, Value: []byte("boom")})
	if want := "~1,0,0,0,9223372036854775,0,e\nboom"; string(got) != want {
		t.Errorf("encodeEntry(huge duration) = %q, want %q", got, want)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{},
		{FreshUntil: 1700000001000, StaleUntil: 1700000061000, Written: 1700000000000, LoadDur: 12345 * time.Microsecond, Fence: 1700000000000000, Value: []byte(`{"a":1}`)},
		{FreshUntil: 10, StaleUntil: 10, Written: 10, Fence: 3, Negative: true},
		{FreshUntil: 10, StaleUntil: 20, Written: 9, Fence: 3, ErrMark: true, Value: []byte("load failed: boom\n")},
		{FreshUntil: math.MaxInt64, StaleUntil: math.MaxInt64, Written: math.MaxInt64, Fence: math.MaxInt64, Value: bytes.Repeat([]byte{0, '\n', 0xff}, 1000)},
	} {
		got, err := Decode(Encode(e))
		if err != nil {
			t.Errorf("decodeEntry(encodeEntry(%+v)): %v", e, err)
			continue
		}
		if !Equal(got, e) {
			t.Errorf("round trip of %+v = %+v", e, got)
		}
	}
}

// TestDecodeEntryAliases checks the value is not copied: it shares the
// input's memory.
func TestDecodeEntryAliases(t *testing.T) {
	b := Encode(Entry{FreshUntil: 1, StaleUntil: 2, Value: []byte("payload")})
	e, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if &e.Value[0] != &b[len(b)-len("payload")] {
		t.Fatal("value does not alias the input")
	}
	b[len(b)-1] = 'D'
	if string(e.Value) != "payloaD" {
		t.Fatalf("value = %q after changing the input", e.Value)
	}
}

func TestDecodeEntryAllocs(t *testing.T) {
	for _, e := range []Entry{
		{FreshUntil: 1700000001000, StaleUntil: 1700000061000, Written: 1700000000000, LoadDur: 12 * time.Millisecond, Fence: 1700000000000000, Value: bytes.Repeat([]byte("v"), 4096)},
		{FreshUntil: 1700000001000, StaleUntil: 1700000001000, Written: 1700000000000, Fence: 1700000000000000, Negative: true},
		{FreshUntil: 1700000001000, StaleUntil: 1700000001000, Written: 1700000000000, Fence: 1700000000000000, ErrMark: true, Value: []byte("boom")},
	} {
		b := Encode(e)
		var err error
		allocs := testing.AllocsPerRun(1000, func() { _, err = Decode(b) })
		if err != nil {
			t.Fatal(err)
		}
		if allocs != 0 {
			t.Errorf("decodeEntry(%q...) allocates %v times per run, want 0", b[:20], allocs)
		}
	}
}

func BenchmarkDecodeEntry(b *testing.B) {
	raw := Encode(Entry{FreshUntil: 1700000001000, StaleUntil: 1700000061000, Written: 1700000000000,
		LoadDur: 12 * time.Millisecond, Fence: 1700000000000000, Value: bytes.Repeat([]byte("v"), 1024)})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, c := range Corrupt {
		f.Add([]byte(c.Raw))
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
		e, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeEntry(%q): error %v does not wrap errCorrupt", b, err)
			}
			return
		}
		if len(e.Value) > 0 && &e.Value[0] != &b[len(b)-len(e.Value)] {
			t.Fatalf("decodeEntry(%q): value does not alias the input's tail", b)
		}
		if e.StaleUntil < e.FreshUntil || e.Negative && (e.ErrMark || len(e.Value) > 0) || e.Oversize && len(e.Value) > 0 {
			t.Fatalf("decodeEntry(%q) = %+v breaks an invariant", b, e)
		}
		enc := Encode(e)
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("decodeEntry(encodeEntry(decodeEntry(%q))) = %q: %v", b, enc, err)
		}
		if !Equal(got, e) {
			t.Fatalf("round trip of %q: %+v, then %+v", b, e, got)
		}
		// The format is canonical: what decodes was written exactly so.
		if !bytes.Equal(enc, b) {
			t.Fatalf("decodeEntry accepted %q, which encodes back as %q", b, enc)
		}
	})
}
