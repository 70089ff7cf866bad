package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stampede-go/stampede/guard"
)

// What the CLI prints comes partly from Redis (keys, error replies,
// published views), which anyone who can write there controls: none of it
// may reach an operator's terminal as control bytes (an escape sequence
// clears the screen, sets the window's title or forges a line).

// printable returns s with its control characters (C0 but tab, DEL, C1)
// and invalid UTF-8 escaped as Go escapes them; the rest as it is.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, n := utf8.DecodeRuneInString(s[i:])
		w = n
		if unsafeRune(r) {
			q := strconv.QuoteRune(r)
			if r == utf8.RuneError && n == 1 {
				q = fmt.Sprintf(`'\x%02x'`, s[i])
			}
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteString(s[i : i+n])
	}
	return b.String()
}

// unsafeRune reports a rune printable escapes.
func unsafeRune(r rune) bool {
	return (r < 0x20 && r != '\t') || (r >= 0x7f && r <= 0x9f) || r == utf8.RuneError
}

// escapeJSON escapes in b, JSON that encoding/json wrote, DEL and the C1
// controls (U+0080 to U+009F), which it leaves as they are (it escapes
// those below U+0020): a terminal may act on them.
func escapeJSON(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return r >= 0x7f && r <= 0x9f }) {
		return b
	}
	var out bytes.Buffer
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r >= 0x7f && r <= 0x9f {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.Write(b[:n])
		}
		b = b[n:]
	}
	return out.Bytes()
}

// shown is s for a message: quoted, and cut to its first 64 bytes.
func shown(s string) string { return shownUpTo(s, 64) }

// maxShownKey is how much of a key read from Redis (a report, a tag's
// key set) a line shows: keys are the guard's callers', and Redis may hold
// larger ones of anyone's (up to MaxKeyBytes).
const maxShownKey = 512

// shownUpTo is s quoted, cut to its first n bytes (at a rune's start),
// with its length, when longer.
func shownUpTo(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// checkKeys refuses, as a command-line error, keys the guard refuses.
func checkKeys(keys []string) error {
	for _, k := range keys {
		switch {
		case k == "":
			return usagef("an empty key")
		case len(k) > guard.MaxKeyBytes:
			return usagef("key %s: over %d bytes", shown(k), guard.MaxKeyBytes)
		}
	}
	return nil
}

// checkTags refuses, as a command-line error, tags the guard refuses.
func checkTags(tags []string) error {
	for _, t := range tags {
		switch {
		case t == "" || strings.Contains(t, "}"):
			return usagef("-tag %s: want a hash tag, not empty, without '}'", shown(t))
		case len(t) > guard.MaxKeyBytes:
			return usagef("-tag %s: over %d bytes", shown(t), guard.MaxKeyBytes)
		}
	}
	return nil
}
