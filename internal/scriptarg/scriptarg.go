// Package scriptarg turns Go values into the arguments stampede's Lua
// scripts take, the same way for every package that calls them.
package scriptarg

import (
	"crypto/rand"
	"encoding/base64"
	"time"
)

// Millis converts d to whole milliseconds for Redis (PX, PEXPIRE and the
// scripts' millisecond arguments), rounding a positive sub-millisecond
// duration up to 1 so it never becomes "no expiry" or "now".
func Millis(d time.Duration) int64 {
	m := d.Milliseconds()
	if m == 0 && d > 0 {
		m = 1
	}
	return m
}

// RandomID returns n random bytes as unpadded base64url: a token, an owner
// id or a channel suffix no other client uses.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand does not fail (it panics on a broken system source)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Token returns 16 random bytes as unpadded base64url (22 characters): a
// lock token. It allocates only the string it returns, since it runs once
// per lock acquisition.
func Token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var s [22]byte
	base64.RawURLEncoding.Encode(s[:], b[:])
	return string(s[:])
}
