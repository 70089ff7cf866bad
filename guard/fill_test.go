package guard

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/scripts"
)

// TestFillProtocol holds the Go side of guard_fill.lua's modes and flags
// to the script's header: every quoted value the header documents for
// ARGV[6] (flags) and ARGV[7] (write mode) has a constant here, and every
// constant is documented there.
func TestFillProtocol(t *testing.T) {
	header := func(argv string) []string {
		src := scripts.Source("guard_fill.lua")
		start := strings.Index(src, "-- "+argv+" ")
		if start < 0 {
			t.Fatalf("guard_fill.lua's header documents no %s", argv)
		}
		var doc strings.Builder
		for i, line := range strings.Split(src[start:], "\n") {
			if i > 0 && !strings.HasPrefix(line, "--         ") {
				break
			}
			doc.WriteString(line)
		}
		var vals []string
		for _, m := range regexp.MustCompile(`"([^"]*)"`).FindAllStringSubmatch(doc.String(), -1) {
			if len(m[1]) <= 1 && !slices.Contains(vals, m[1]) {
				vals = append(vals, m[1])
			}
		}
		slices.Sort(vals)
		return vals
	}
	modes := []string{string(fillWrite), string(fillIfMissing), string(fillKeepTail), string(fillIfSame), string(fillNone)}
	flags := []string{string(flagValue), string(flagNegative), string(flagError), string(flagRevalidate),
		string(flagFailing), string(flagPass), string(flagOversize)}
	slices.Sort(modes)
	slices.Sort(flags)
	if got := header("ARGV[7]"); !slices.Equal(got, modes) {
		t.Errorf("write modes in guard_fill.lua's header %q; the Go constants %q", got, modes)
	}
	if got := header("ARGV[6]"); !slices.Equal(got, flags) {
		t.Errorf("flags in guard_fill.lua's header %q; the Go constants %q", got, flags)
	}
}
