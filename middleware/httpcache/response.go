package httpcache

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// A stored response is
//
//	"shr" version(2)  uvarint status  uvarint initial age (seconds)
//	  uvarint #headers  { str name  uvarint #values { str value } }
//	  str body length (decimal)  body
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

// skipStored are never stored: hop-by-hop fields and the fields the engine
// sets when serving. (Set-Cookie is stored only with StoreSetCookie: a
// response carrying it is not shared otherwise. A Cache-Status of the
// caches behind this one is stored, and this cache's member follows
// theirs when it is served: RFC 9211 §2.)
var skipStored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Age": true, "Content-Length": true,
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
	initialAge int64         // seconds
	fields     []storedField // in stored order; names are distinct
	body       []byte
	head       string // the encoded head the fields alias
	headLen    int    // bytes before the body: what a revalidation replaces
	// contentLength is the field served: the body's length in decimal.
	contentLength []string
	// ages keeps the Age field of a response decoded once for many hits
	// (hit.go); nil for one decoded once for one use.
	ages *ageMemo
}

// storedField is one header field of a stored response.
type storedField struct {
	name string
	vals []string
}

// get returns the values of the field name (canonical), or nil.
func (sr *storedResponse) get(name string) []string {
	for _, f := range sr.fields {
		if f.name == name {
			return f.vals
		}
	}
	return nil
}

// header returns the fields as a new http.Header.
func (sr *storedResponse) header() http.Header {
	h := make(http.Header, len(sr.fields))
	for _, f := range sr.fields {
		h[f.name] = f.vals
	}
	return h
}

func encodeResponse(status int, initialAge int64, h http.Header, body []byte) []byte {
	b := appendHead(make([]byte, 0, headSize(h)+len(body)), status, initialAge, h, len(body))
	return append(b, body...)
}

// encodeExactly encodes a response to store, and reports whether it reads
// back exactly: a field name or value the decoder refuses (CR, LF or NUL
// in a value, a byte a field name may not hold, more fields or values than
// it allows) makes the response one the engine does not store, rather than
// one that turns into garbage (and a miss per request) once stored.
func encodeExactly(status int, initialAge int64, h http.Header, body []byte) ([]byte, bool) {
	val := encodeResponse(status, initialAge, h, body)
	sr, err := decodeResponse(val)
	if err != nil || sr.status != status || len(sr.body) != len(body) {
		return nil, false
	}
	var conn []string
	for _, v := range h["Connection"] {
		conn = append(conn, strings.Split(v, ",")...)
	}
	n := 0
	for k, vs := range h {
		if !storedHeader(http.CanonicalHeaderKey(k), conn) || len(vs) == 0 {
			continue
		}
		n++
		if !slices.Equal(sr.get(k), vs) {
			return nil, false
		}
	}
	return val, n == len(sr.fields)
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
	// In name order: the same response always encodes alike.
	names := make([]string, 0, len(h))
	for k, vs := range h {
		if storedHeader(http.CanonicalHeaderKey(k), conn) && len(vs) > 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	b = append(b, entryMagic...)
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, uint64(status))
	b = binary.AppendUvarint(b, uint64(initialAge))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		vs := h[k]
		b = appendStr(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendStr(b, v)
		}
	}
	// The body's length in decimal: served as Content-Length as it is.
	var digits [20]byte
	return appendStr(b, string(strconv.AppendInt(digits[:0], int64(bodyLen), 10)))
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
	if n <= 0 || v > limit || n != uvarintLen(v) {
		// Not in the one form this package writes (a number padded
		// with 0x80 bytes, say): garbage, as any other corruption.
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// uvarintLen is the length of v's shortest encoding (binary.PutUvarint).
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
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

// decodeResponse parses a stored response. The body aliases b; the
// header's names and values are substrings of one string (head) and its
// value lists share one array, which holds Content-Length too, so that a
// decoding costs three allocations.
func decodeResponse(b []byte) (storedResponse, error) {
	var sr storedResponse
	n, nv, headLen, ok := scanResponse(b)
	if !ok {
		return sr, errCorruptResponse
	}
	head := string(b[:headLen])
	d := strDecoder{s: head[len(entryMagic)+1:]}
	sr.status = int(d.uvarint())
	sr.initialAge = int64(d.uvarint())
	d.uvarint() // the header count: n
	fields := make([]storedField, n)
	vals := make([]string, nv+1)
	for i := range fields {
		name := d.str()
		if sr.get(name) != nil || !storedHeader(http.CanonicalHeaderKey(name), nil) {
			return sr, errCorruptResponse
		}
		k := d.uvarint()
		fields[i] = storedField{name: name, vals: vals[:k:k]}
		for j := range k {
			vals[j] = d.str()
		}
		vals = vals[k:]
		sr.fields = fields[:i+1]
	}
	vals[0] = d.str()
	sr.contentLength = vals[:1:1]
	sr.body, sr.head, sr.headLen = b[headLen:], head, headLen
	return sr, nil
}

// scanResponse validates a stored response, returning its header count,
// value count and head length.
func scanResponse(b []byte) (n, nv uint64, headLen int, ok bool) {
	if len(b) < len(entryMagic)+1 || string(b[:len(entryMagic)]) != entryMagic || b[len(entryMagic)] != entryVersion {
		return 0, 0, 0, false
	}
	d := decoder{b: b[len(entryMagic)+1:]}
	if status := d.uvarint(999); status < 200 {
		return 0, 0, 0, false
	}
	d.uvarint(maxDelta)
	n = d.uvarint(maxHeaders)
	for i := uint64(0); i < n && !d.bad; i++ {
		name := d.bytes()
		k := d.uvarint(maxValues)
		if d.bad || !validName(name) || k == 0 {
			return 0, 0, 0, false
		}
		for j := uint64(0); j < k && !d.bad; j++ {
			if !validValue(d.bytes()) {
				return 0, 0, 0, false
			}
		}
		nv += k
	}
	digits := d.bytes()
	if d.bad || !isDigits(string(digits)) || len(digits) > 1 && digits[0] == '0' {
		return 0, 0, 0, false
	}
	bodyLen, err := strconv.Atoi(string(digits))
	if err != nil || bodyLen != len(d.b) {
		return 0, 0, 0, false
	}
	return n, nv, len(b) - bodyLen, true
}

// strDecoder reads a head that scanResponse validated.
type strDecoder struct{ s string }

func (d *strDecoder) uvarint() uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		c := d.s[0]
		d.s = d.s[1:]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
}

func (d *strDecoder) str() string {
	n := d.uvarint()
	s := d.s[:n]
	d.s = d.s[n:]
	return s
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
