package entry

import (
	"bytes"
	"strings"
)

// FarFresh is a fresh_until far ahead of any Redis clock (2100-01-01), so the
// corrupt entries below would count as fresh if a parser accepted them.
const FarFresh = "4102444800000"

// Corrupt are values Decode must reject, with why (a part of the error):
// test data for this package and its users, whose scripts must treat each
// as missing too.
var Corrupt = []struct {
	Name, Raw, Why string
}{
	{"empty", "", "no header"},
	{"garbage", "garbage", "no header"},
	{"tilde only", "~", "no header"},
	{"no comma", "~1", "no header"},
	{"version 2", "~2," + FarFresh + "," + FarFresh + ",0,0,1,\nx", "version"},
	{"version 10", "~10," + FarFresh + "," + FarFresh + ",0,0,1,\nx", "version"},
	{"uppercase tag", "~V," + FarFresh + ",\n", "version"},
	{"no newline", "~1," + FarFresh + "," + FarFresh + ",0,0,1,", "no newline"},
	{"magic only", "~1,", "no newline"},
	{"empty header", "~1,\n", "fresh_until: empty"},
	{"one field", "~1," + FarFresh + "\n", "header ends after fresh_until"},
	{"five fields", "~1," + FarFresh + "," + FarFresh + ",0,0,1\nx", "header ends after fence"},
	{"missing fence", "~1," + FarFresh + "," + FarFresh + ",0,0,,\nx", "fence: empty"},
	{"missing stale", "~1," + FarFresh + ",,0,0,1,\nx", "stale_until: empty"},
	{"minus", "~1,-5," + FarFresh + ",0,0,1,\n", "fresh_until: not a digit"},
	{"plus", "~1,+5," + FarFresh + ",0,0,1,\n", "fresh_until: not a digit"},
	{"space", "~1, " + FarFresh + "," + FarFresh + ",0,0,1,\n", "fresh_until: not a digit"},
	{"trailing space", "~1," + FarFresh + " ," + FarFresh + ",0,0,1,\n", "unexpected byte"},
	{"hex", "~1,0x10," + FarFresh + ",0,0,1,\n", "unexpected byte"},
	{"letter in number", "~1," + FarFresh + "," + FarFresh + ",0,0,1a,\n", "fence: unexpected byte"},
	{"non-ascii digit", "~1," + FarFresh + "," + FarFresh + ",0,0,\u0661,\n", "fence: not a digit"},
	{"leading zero", "~1,0" + FarFresh + "," + FarFresh + ",0,0,1,\n", "leading zero"},
	{"double zero", "~1," + FarFresh + "," + FarFresh + ",00,0,1,\n", "written: leading zero"},
	{"20 digits", "~1," + FarFresh + "," + FarFresh + ",0,0,10000000000000000000,\n", "fence: overflows"},
	{"int64 overflow", "~1," + FarFresh + "," + FarFresh + ",0,0,9223372036854775808,\n", "fence: overflows"},
	{"stale overflow", "~1," + FarFresh + ",9223372036854775808,0,0,1,\n", "stale_until: overflows"},
	{"load_us overflows a duration", "~1," + FarFresh + "," + FarFresh + ",0,9223372036854776,1,\n", "load_us"},
	{"stale before fresh", "~1," + FarFresh + ",4102444799999,0,0,1,\n", "stale_until"},
	{"unknown flag", "~1," + FarFresh + "," + FarFresh + ",0,0,1,x\nv", "bad flags"},
	{"uppercase flag", "~1," + FarFresh + "," + FarFresh + ",0,0,1,N\n", "bad flags"},
	{"both flags", "~1," + FarFresh + "," + FarFresh + ",0,0,1,ne\n", "bad flags"},
	{"duplicate flag", "~1," + FarFresh + "," + FarFresh + ",0,0,1,ee\nboom", "bad flags"},
	{"extra comma", "~1," + FarFresh + "," + FarFresh + ",0,0,1,,\nv", "bad flags"},
	{"extra field", "~1," + FarFresh + "," + FarFresh + ",0,0,1,2,\nv", "bad flags"},
	{"carriage return", "~1," + FarFresh + "," + FarFresh + ",0,0,1,\r\nv", "bad flags"},
	{"negative with payload", "~1," + FarFresh + "," + FarFresh + ",0,0,1,n\nx", "negative entry with a 1-byte payload"},
	{"oversize marker with payload", "~1," + FarFresh + "," + FarFresh + ",0,0,1,o\nx", "oversize marker with a 1-byte payload"},
	{"oversize and negative", "~1," + FarFresh + "," + FarFresh + ",0,0,1,no\n", "bad flags"},
	{"long header", "~1," + strings.Repeat("1", 200) + "," + FarFresh + ",0,0,1,\n", "header longer than 128"},
	{"long header no newline", "~1," + FarFresh + "," + FarFresh + ",0,0,1," + strings.Repeat("x", 200), "header longer than 128"},
}

// Equal reports whether a and b are the same entry (for tests).
func Equal(a, b Entry) bool {
	return a.FreshUntil == b.FreshUntil && a.StaleUntil == b.StaleUntil && a.Written == b.Written &&
		a.LoadDur == b.LoadDur && a.Fence == b.Fence && a.Negative == b.Negative && a.ErrMark == b.ErrMark &&
		a.MustRevalidate == b.MustRevalidate && a.Oversize == b.Oversize && bytes.Equal(a.Value, b.Value)
}
