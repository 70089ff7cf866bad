package hashtag

import (
	"strings"
	"testing"
)

// slot is Redis Cluster's key slot (CRC16/XMODEM of the hash tag, mod 16384),
// written from the cluster specification so the tests need no server.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// TestSlot: Slot is the specification's slot.
func TestSlot(t *testing.T) {
	for _, key := range []string{"123456789", "foo", "{user1000}.following", "foo{}{bar}", "", "{", "}{x}", "ns:{a%7Db}:lease"} {
		if got, want := Slot(key), int(slot(key)); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestSlotMatchesSpec(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{"123456789": 12739 % 16384, "foo": 12182, "{user1000}.following": 3443, "foo{}{bar}": 8363} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "%00"},
		{"plain", "plain"},
		{"a}b", "a%7Db"},
		{"%", "%25"},
		{"%7D", "%257D"},
		{"{x}", "{x%7D"},
		{"}", "%7D"},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func checkKey(t *testing.T, key string) {
	t.Helper()
	base := Base("ns:", key)
	want := slot(base)
	for _, suffix := range []string{"", ":fence", ":q", ":wake", "}", "{", ":{x}"} {
		if got := slot(base + suffix); got != want {
			t.Fatalf("key %q: slot(%q) = %d, want %d (same as %q)", key, base+suffix, got, want, base)
		}
	}
	if strings.Contains(Escape(key), "}") || Escape(key) == "" {
		t.Fatalf("Escape(%q) = %q: holds '}' or is empty", key, Escape(key))
	}
}

func TestDerivedNamesShareSlot(t *testing.T) {
	for _, key := range []string{"", "}", "{", "{}", "}{", "a}b{c", "{user}", "\x00", "%7D", strings.Repeat("}", 100)} {
		checkKey(t, key)
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "}", "{}", "%", "a%7Db", "x\x00y"} {
		f.Add(s, "%7D")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		checkKey(t, a)
		if a != b && Escape(a) == Escape(b) {
			t.Fatalf("Escape(%q) == Escape(%q) == %q", a, b, Escape(a))
		}
	})
}

func TestTag(t *testing.T) {
	for key, want := range map[string]string{"abc": "", "{a}b": "a", "x{a}{b}": "a", "{}a": "", "a{b": "", "a}{b}": "b", "{a{b}": "a{b"} {
		got, ok := Tag(key)
		if got != want || ok != (want != "") {
			t.Errorf("Tag(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
}

// TestKeyBase: a key with a tag of its own is named in its tag's slot, a key
// without one as Base names it, and the names stay apart.
func TestKeyBase(t *testing.T) {
	if got := KeyBase("ns:", "plain"); got != Base("ns:", "plain") {
		t.Errorf("an untagged key: %q, want Base's %q", got, Base("ns:", "plain"))
	}
	a, b := KeyBase("ns:", "{user:42}:profile"), KeyBase("ns:", "{user:42}:friends")
	if slot(a) != slot(b) || slot(a) != slot("user:42") {
		t.Errorf("keys of one tag in slots %d, %d; want %d", slot(a), slot(b), slot("user:42"))
	}
	if slot(KeyBase("ns:", "{h2:abc}v:1")) != slot(KeyBase("ns:", "h2:abc")) {
		t.Error("a key tagged with another key is not in that key's slot")
	}
}

// FuzzKeyBase: two distinct keys never share a name, whatever suffixes the
// guard appends; a key's names share one slot.
func FuzzKeyBase(f *testing.F) {
	for _, p := range [][2]string{{"{a}b", "{a}b:lease"}, {"{a}", "a"}, {"{a}1:x", "{a}"}, {"x", "{x}"}, {"{%}", "{%25}"}} {
		f.Add(p[0], p[1])
	}
	suffixes := []string{"", ":lease", ":fence", ":w", ":inv"}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, sa := range suffixes {
			na := KeyBase("ns:", a) + sa
			if slot(na) != slot(KeyBase("ns:", a)) {
				t.Fatalf("%q: names in two slots", a)
			}
			for _, sb := range suffixes {
				if a != b || sa != sb {
					if nb := KeyBase("ns:", b) + sb; na == nb {
						t.Fatalf("%q%s and %q%s share the name %q", a, sa, b, sb, na)
					}
				}
			}
		}
	})
}
