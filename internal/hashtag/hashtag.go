// Package hashtag builds Redis key names that share one Redis Cluster hash
// slot, whatever bytes the user's key holds.
//
// Redis Cluster hashes only the part of a key between the first '{' and the
// first '}' after it, when that part is not empty. Names are built as
// prefix + "{" + Escape(key) + "}" + suffix: the prefix holds no brace, so the
// tag starts at our '{'; the escaped key holds no '}' and is never empty, so
// the tag ends at our '}' and is the same for every suffix.
package hashtag

import (
	"strconv"
	"strings"
)

// Escape returns key with '%' and '}' percent-encoded, and "%00" for the
// empty key, so that the result is never empty, holds no '}' and different
// keys never escape to the same string.
func Escape(key string) string {
	if key == "" {
		return "%00"
	}
	if !strings.ContainsAny(key, "%}") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Base returns prefix + "{" + Escape(key) + "}". Names derived from it by
// appending a suffix all hash to the same slot. prefix must not contain '{'
// or '}'; ValidPrefix checks that.
func Base(prefix, key string) string {
	return prefix + "{" + Escape(key) + "}"
}

// Tag returns the hash tag key holds by Redis Cluster's rule: the bytes
// between its first '{' and the first '}' after it, when not empty.
func Tag(key string) (string, bool) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j], true
		}
	}
	return "", false
}

// KeyBase is Base for a key that may carry a hash tag of its own: the
// names of a key with tag T hash to T's slot, as a Redis user expects
// ("{user:42}:profile" and "{user:42}:friends" share a slot), and those of
// a key without a tag to the key's own, Base's. They are
//
//	prefix + "{" + Escape(T) + "}/" + len(key) + ":" + key
//
// so that no two keys, nor a key with a tag and one without, share a name,
// whatever suffix follows: what comes after the '}' is "/" only for tagged
// keys, and the length delimits the key.
func KeyBase(prefix, key string) string {
	tag, ok := Tag(key)
	if !ok {
		return Base(prefix, key)
	}
	return prefix + "{" + Escape(tag) + "}/" + strconv.Itoa(len(key)) + ":" + key
}

// ValidPrefix reports whether prefix can be used with Base.
func ValidPrefix(prefix string) bool {
	return !strings.ContainsAny(prefix, "{}")
}

// Slot returns the Redis Cluster hash slot of the key name: CRC16/XMODEM
// of its hash tag (Tag's rule), or of the whole name when it has none,
// modulo 16384.
func Slot(name string) int {
	if t, ok := Tag(name); ok {
		name = t
	}
	var crc uint16
	for i := 0; i < len(name); i++ {
		crc ^= uint16(name[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % 16384)
}
