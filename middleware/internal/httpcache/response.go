package httpcache

import (
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
)

// A stored response is
//
//	"shr" version(1)  uvarint status  uvarint #headers
//	  { str name  uvarint #values { str value } }  str body
//
// where str is a uvarint length then the bytes. Decoding checks every
// length against what is left, bounds the counts, validates names and
// values, and rejects trailing bytes: anything else is garbage, which the
// engine treats as a miss.
const (
	entryMagic   = "shr"
	entryVersion = 1
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

func encodeResponse(status int, h http.Header, body []byte) []byte {
	var conn []string
	for _, v := range h["Connection"] {
		conn = append(conn, strings.Split(v, ",")...)
	}
	n := 0
	size := len(entryMagic) + 1 + 3 + 3 + len(body) + 5
	for k, vs := range h {
		if !storedHeader(http.CanonicalHeaderKey(k), conn) || len(vs) == 0 {
			continue
		}
		n++
		size += len(k) + 4
		for _, v := range vs {
			size += len(v) + 3
		}
	}
	b := make([]byte, 0, size)
	b = append(b, entryMagic...)
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, uint64(status))
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
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
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

// decodeResponse parses a stored response. body aliases b.
func decodeResponse(b []byte) (status int, h http.Header, body []byte, err error) {
	if len(b) < len(entryMagic)+1 || string(b[:len(entryMagic)]) != entryMagic || b[len(entryMagic)] != entryVersion {
		return 0, nil, nil, errCorruptResponse
	}
	d := decoder{b: b[len(entryMagic)+1:]}
	status = int(d.uvarint(999))
	if status < 200 {
		return 0, nil, nil, errCorruptResponse
	}
	n := d.uvarint(maxHeaders)
	h = make(http.Header, n)
	for i := uint64(0); i < n && !d.bad; i++ {
		name := d.bytes()
		nv := d.uvarint(maxValues)
		if d.bad || !validName(name) || nv == 0 {
			return 0, nil, nil, errCorruptResponse
		}
		vals := make([]string, 0, nv)
		for j := uint64(0); j < nv && !d.bad; j++ {
			v := d.bytes()
			if !validValue(v) {
				return 0, nil, nil, errCorruptResponse
			}
			vals = append(vals, string(v))
		}
		k := string(name)
		if _, dup := h[k]; dup || !storedHeader(http.CanonicalHeaderKey(k), nil) {
			return 0, nil, nil, errCorruptResponse
		}
		h[k] = vals
	}
	body = d.bytes()
	if d.bad || len(d.b) != 0 {
		return 0, nil, nil, errCorruptResponse
	}
	return status, h, body, nil
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
