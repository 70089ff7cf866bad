package httpcache

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"slices"
	"strings"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// Vary (RFC 9111 §4.1). A response whose Vary names request headers the key
// does not hold is stored per variant. The URL's key then holds a record,
// the list of those names and a generation; each variant lives under a key
// derived from the URL's key, the generation and the request's normalised
// values of the named headers, in the URL key's Redis Cluster hash slot
// (the variant key carries the URL key's hash tag). A request reads the
// record, then its variant: two round trips where a response that does not
// vary (or varies on KeyHeaders only) costs one.
//
// The generation ties the variants to their record: invalidating the URL's
// key drops the record, and the variants under the old generation are never
// read again (they expire). A variant whose response no longer varies on
// the record's names is served to its own request only, and the record is
// dropped so that the next request learns the new names.
//
// A record is
//
//	"shv" version(1)  str generation  uvarint #names  { str name }
const (
	recordMagic   = "shv"
	recordVersion = 1
	maxVaryNames  = 64
)

type varyRecord struct {
	gen   string
	names []string
}

func encodeRecord(rec varyRecord) []byte {
	b := make([]byte, 0, 32+16*len(rec.names))
	b = append(b, recordMagic...)
	b = append(b, recordVersion)
	b = appendStr(b, rec.gen)
	b = binary.AppendUvarint(b, uint64(len(rec.names)))
	for _, n := range rec.names {
		b = appendStr(b, n)
	}
	return b
}

func isRecord(b []byte) bool {
	return len(b) > len(recordMagic) && string(b[:len(recordMagic)]) == recordMagic
}

// decodeRecord parses a record; names must be canonical, sorted, distinct.
func decodeRecord(b []byte) (varyRecord, error) {
	var rec varyRecord
	if !isRecord(b) || b[len(recordMagic)] != recordVersion {
		return rec, errCorruptResponse
	}
	d := decoder{b: b[len(recordMagic)+1:]}
	gen := d.bytes()
	n := d.uvarint(maxVaryNames)
	if d.bad || len(gen) == 0 || n == 0 {
		return rec, errCorruptResponse
	}
	rec.gen = string(gen)
	rec.names = make([]string, 0, n)
	for range n {
		name := d.bytes()
		if d.bad || !validName(name) || http.CanonicalHeaderKey(string(name)) != string(name) ||
			(len(rec.names) > 0 && rec.names[len(rec.names)-1] >= string(name)) {
			return rec, errCorruptResponse
		}
		rec.names = append(rec.names, string(name))
	}
	if len(d.b) != 0 {
		return rec, errCorruptResponse
	}
	return rec, nil
}

// varyNames returns the request headers a response varies on that the key
// does not hold: canonical, sorted, distinct. star reports Vary: * (or
// more names than a record holds): such a response is never shared.
func (e *engine) varyNames(h http.Header) (names []string, star bool) {
	for _, v := range h["Vary"] {
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			switch {
			case f == "":
			case f == "*" || !validName([]byte(f)):
				return nil, true
			default:
				if name := http.CanonicalHeaderKey(f); !e.keyed(name) {
					names = append(names, name)
				}
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	return names, len(names) > maxVaryNames
}

func newGeneration() string {
	var b [9]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// variantKey is the key of r's variant of the URL key primary under rec.
// It carries primary's hash tag, so that every variant of a URL shares the
// slot of the URL's own names.
func variantKey(primary string, rec varyRecord, r *http.Request) string {
	b := make([]byte, 0, 256)
	b = appendStr(b, primary)
	b = appendStr(b, rec.gen)
	b = binary.AppendUvarint(b, uint64(len(rec.names)))
	for _, name := range rec.names {
		b = appendStr(b, name)
		b = appendVaryValue(b, varyValues(r, name))
	}
	sum := sha256.Sum256(b)
	return "{" + hashTag(primary) + "}v:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// hashTag is the part of key Redis Cluster hashes as the guard names it:
// its own hash tag, else the whole key (hashtag.KeyBase).
func hashTag(key string) string {
	if tag, ok := hashtag.Tag(key); ok {
		return tag
	}
	return key
}

// appendVaryValue appends the value of one selecting header, exactly:
// absent differs from present, and each field line is kept as it came, in
// order. RFC 9111 §4.1 allows a cache to normalise them (combine the
// lines, drop whitespace, fold the case of a case-insensitive list), but
// the handler that answered reads them as they came: a Go handler reads
// the first line alone (Header.Get), or matches a language tag by its
// case, so a request spelled otherwise filled the variant that every
// request of the common spelling was then served ("FR-FR" answered "en",
// then served to "fr-fr"). A spelling of its own is a variant of its own.
func appendVaryValue(b []byte, vals []string) []byte {
	if len(vals) == 0 {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(vals)))
	for _, v := range vals {
		b = appendStr(b, v)
	}
	return b
}

// varyValues returns the field lines of the request header name: Host's
// is r.Host, which net/http takes out of r.Header.
func varyValues(r *http.Request, name string) []string {
	if name == "Host" {
		return []string{r.Host}
	}
	return r.Header[name]
}
