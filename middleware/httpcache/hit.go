package httpcache

import (
	"strconv"
	"sync/atomic"

	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// A hit writes a stored response's fields into the response's header as
// they are: each a []string the engine made once, when it decoded the
// response, and hands to every hit that serves it, as net/http's own
// Header methods allow (they replace a value or append to a copy, never
// write into one). The stored response is decoded once per entry, not per
// hit: the memo keeps the decoded head beside the key, and a hit whose
// entry starts with the same head bytes takes it, with its own body.

// hitEntry is a stored response decoded for the hits of its key.
type hitEntry struct {
	key     string
	sr      storedResponse // body nil: each hit's entry holds its own
	bodyLen int
	ages    ageMemo
}

// maxMemoHit bounds what one hitEntry keeps (its key and head): a response
// with a longer head is decoded on every hit, so that the memo stays small
// whatever the responses stored.
const maxMemoHit = 2 << 10

// decoded returns the stored response val of key, decoded once for all the
// hits that serve the same head. A head is everything the decoding reads
// but the body, whose length it states: val with the head of the last
// decoding and a body of that length decodes alike.
func (e *engine) decoded(key string, val []byte) (storedResponse, error) {
	slot := e.hits.stringSlot(key)
	if h := slot.Load(); h != nil && h.key == key && len(val) == len(h.sr.head)+h.bodyLen &&
		string(val[:len(h.sr.head)]) == h.sr.head {
		sr := h.sr
		sr.body = val[len(sr.head):]
		return sr, nil
	}
	sr, err := decodeResponse(val)
	if err != nil || len(key)+len(sr.head) > maxMemoHit {
		return sr, err
	}
	h := &hitEntry{key: key, sr: sr, bodyLen: len(sr.body)}
	h.sr.body = nil
	h.sr.ages = &h.ages
	slot.Store(h)
	sr.ages = &h.ages
	return sr, nil
}

// ageField returns the Age field of sr for age seconds.
func (sr *storedResponse) ageField(age int64) []string {
	if sr.ages == nil {
		return []string{strconv.FormatInt(age, 10)}
	}
	return sr.ages.field(age)
}

// ageMemo keeps the Age field last served for one stored response: the
// hits of one second share it.
type ageMemo struct {
	last atomic.Pointer[ageField]
}

type ageField struct {
	age   int64
	field [1]string
}

func (m *ageMemo) field(age int64) []string {
	if f := m.last.Load(); f != nil && f.age == age {
		return f.field[:]
	}
	f := &ageField{age: age}
	f.field[0] = strconv.FormatInt(age, 10)
	m.last.Store(f)
	return f.field[:]
}

// statusFields are the Cache-Status fields of this cache alone, made once,
// in the order of cachestatus's constants.
var statusFields = [...][]string{
	{cachestatus.Hit}, {cachestatus.Stale}, {cachestatus.Stored}, {cachestatus.Collapsed},
	{cachestatus.Degraded}, {cachestatus.Miss}, {cachestatus.Request}, {cachestatus.Bypass},
	{cachestatus.Passed},
}

// statusField returns the Cache-Status field of the member status.
func statusField(status string) []string {
	for _, f := range statusFields {
		if f[0] == status {
			return f
		}
	}
	return []string{status}
}
