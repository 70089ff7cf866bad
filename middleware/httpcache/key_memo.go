package httpcache

import (
	"encoding/binary"
	"net/http"
)

// The derived key costs two SHA-256 sums, a decoded and sorted query and a
// normalised path: work a hot URL would repeat on every request. The memo
// keeps each recent key beside the raw input it came from, everything of
// the request deriveKey reads, as it is: the same raw input always derives
// the same key, so a request whose raw input matches takes the kept key,
// and one that differs in any byte derives its own.

// keyEntry is a derived key and the raw input it was derived from.
type keyEntry struct {
	in, key string
}

// maxRawKeyInput is the longest raw input the memo keeps: a longer one is
// derived on every request, so that the memo stays small whatever the URLs
// sent.
const maxRawKeyInput = 512

// derived is r's key by the default rules (key.go).
func (e *engine) derived(r *http.Request) string {
	host := e.host(r)
	var stack [maxRawKeyInput]byte
	in, ok := appendRawKeyInput(stack[:0], r, host, e.keyHeaders, e.forwarding)
	if !ok || len(in) > maxRawKeyInput {
		return deriveKey(r, host, e.keyHeaders, e.forwarding)
	}
	slot := e.keys.bytesSlot(in)
	if k := slot.Load(); k != nil && k.in == string(in) {
		return k.key
	}
	key := deriveKey(r, host, e.keyHeaders, e.forwarding)
	slot.Store(&keyEntry{in: string(in), key: key})
	return key
}

// appendRawKeyInput appends everything of r deriveKey reads, uncanonical,
// each string preceded by its length and each list by its count, so that
// two requests encode alike only when deriveKey reads the same of both.
// The keyed header names and whether forwarding headers are keyed are the
// engine's, the same for every request, so only their values are here.
// It reports false for a target with user information, which it leaves to
// deriveKey (rare; its encoding would allocate).
func appendRawKeyInput(b []byte, r *http.Request, host string, headers []string, forwarding bool) ([]byte, bool) {
	u := r.URL
	if u.User != nil {
		return b, false
	}
	tls := byte(0)
	if r.TLS != nil {
		tls = 1
	}
	b = append(b, tls)
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	b = appendStr(b, method)
	b = appendStr(b, host)
	b = appendStr(b, u.Scheme)
	b = appendStr(b, u.Opaque)
	b = appendStr(b, u.Host)
	b = appendStr(b, u.Path)
	b = appendStr(b, u.RawPath)
	b = appendStr(b, u.RawQuery)
	for _, name := range headers {
		vals := r.Header[name]
		b = binary.AppendUvarint(b, uint64(len(vals)))
		for _, v := range vals {
			b = appendStr(b, v)
		}
	}
	if forwarding {
		b = appendRawForwarding(b, r.Header)
	}
	return b, true
}

// appendRawForwarding appends the forwarding headers h carries, as
// appendForwarding does, with Forwarded as it is: its client pairs are
// left out of the key, not of the raw input.
func appendRawForwarding(b []byte, h http.Header) []byte {
	present, n := forwardingPresent(h)
	b = binary.AppendUvarint(b, uint64(n))
	for i := 0; n > 0 && i < len(forwardingHeaders); i++ {
		if present[i] {
			n--
			b = appendValues(b, forwardingHeaders[i], h[forwardingHeaders[i]])
		}
	}
	return b
}
