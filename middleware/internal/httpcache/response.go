package httpcache

import (
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
)

// A stored response is
//
//	"shr" version(2)  uvarint status  uvarint initial age (seconds)
//	  uvarint #headers  { str name  uvarint #values { str value } }  str body
//
// The initial age is the age the response had when the engine received it
// (RFC 9111 §4.2.3, corrected_initial_age): the Age sent with it adds the
// time it has been stored. Everything before the body is the head, which a
// revalidation (a 304) replaces without moving the body.
//
// where str is a uvarint length then the bytes. Decoding checks every
// length against what is left, bounds the counts, validates names and
// values, and rejects trailing bytes: anything else is garbage, which the
// engine treats as a miss.
const (
	entryMagic   = "shr"
	entryVersion = 2
	maxHeaders   = 1024
	maxValues    = 1024
)

var errCorruptResponse = errors.New("httpcache: corrupt stored response")

// skipStored are never stored: hop-by-hop fields, fields the engine sets
// when serving, and Set-Cookie (a response carrying it is never shared;
// dropping it too is belt and braces).
var skipStored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Set-Cookie": true, "Age": true, "Cache-Status": true, "Content-Length": true,
}

// storedHeader reports whether name is stored; conn holds the names listed
// in the response's Connection header, hop-by-hop as well.
func storedHeader(name string, conn []string) bool {
	if skipStored[name] || strings.HasPrefix(name, http.TrailerPrefix) {
		return false
	}
	for _, c := range conn {
		if http.CanonicalHeaderKey(strings.TrimSpace(c)) == name {
			return false
		}
	}
	return true
}

// storedResponse is a decoded stored response; body aliases the entry.
type storedResponse struct {
	status     int
	initialAge int64 // seconds
	header     http.Header
	body       []byte
	headLen    int // bytes before the body: what a revalidation replaces
}

func encodeResponse(status int, initialAge int64, h http.Header, body []byte) []byte {
	b := appendHead(make([]byte, 0, headSize(h)+len(body)), status, initialAge, h, len(body))
	return append(b, body...)
}

// encodeHead returns the head of a stored response: everything before a
// body of bodyLen bytes.
func encodeHead(status int, initialAge int64, h http.Header, bodyLen int) []byte {
	return appendHead(make([]byte, 0, headSize(h)), status, initialAge, h, bodyLen)
}

// headSize is a close upper bound of the head's size.
func headSize(h http.Header) int {
	size := len(entryMagic) + 1 + 3 + 5 + 3 + 10
	for k, vs := range h {
		size += len(k) + 4
		for _, v := range vs {
			size += len(v) + 3
		}
	}
	return size
}

func appendHead(b []byte, status int, initialAge int64, h http.Header, bodyLen int) []byte {
	var conn []string
	for _, v := range h["Connection"] {
		conn = append(conn, strings.Split(v, ",")...)
	}
	n := 0
	for k, vs := range h {
		if storedHeader(http.CanonicalHeaderKey(k), conn) && len(vs) > 0 {
			n++
		}
	}
	b = append(b, entryMagic...)
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, uint64(initialAge))
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		if !storedHeader(http.CanonicalHeaderKey(k), conn) || len(vs) == 0 {
			continue
		}
		b = appendStr(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendStr(b, v)
		}
	}
	return binary.AppendUvarint(b, uint64(bodyLen))
}

// decoder reads a stored response; the first failure sticks.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint(limit uint64) uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > limit {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint(uint64(len(d.b)))
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

// decodeResponse parses a stored response. The body aliases b.
func decodeResponse(b []byte) (storedResponse, error) {
	var sr storedResponse
	if len(b) < len(entryMagic)+1 || string(b[:len(entryMagic)]) != entryMagic || b[len(entryMagic)] != entryVersion {
		return sr, errCorruptResponse
	}
	d := decoder{b: b[len(entryMagic)+1:]}
	sr.status = int(d.uvarint(999))
	sr.initialAge = int64(d.uvarint(maxDelta))
	if sr.status < 200 {
		return sr, errCorruptResponse
	}
	n := d.uvarint(maxHeaders)
	h := make(http.Header, n)
	for i := uint64(0); i < n && !d.bad; i++ {
		name := d.bytes()
		nv := d.uvarint(maxValues)
		if d.bad || !validName(name) || nv == 0 {
			return sr, errCorruptResponse
		}
		vals := make([]string, 0, nv)
		for j := uint64(0); j < nv && !d.bad; j++ {
			v := d.bytes()
			if !validValue(v) {
				return sr, errCorruptResponse
			}
			vals = append(vals, string(v))
		}
		k := string(name)
		if _, dup := h[k]; dup || !storedHeader(http.CanonicalHeaderKey(k), nil) {
			return sr, errCorruptResponse
		}
		h[k] = vals
	}
	body := d.bytes()
	if d.bad || len(d.b) != 0 {
		return sr, errCorruptResponse
	}
	sr.header, sr.body, sr.headLen = h, body, len(b)-len(body)
	return sr, nil
}

func validName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validValue(b []byte) bool {
	for _, c := range b {
		if c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return true
}
