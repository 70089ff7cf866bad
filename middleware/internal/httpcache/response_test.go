package httpcache

import (
	"bytes"
	"net/http"
	"testing"
)

// FuzzDecodeResponse: decoding never panics, and what decodes re-encodes to
// an entry that decodes alike with no Set-Cookie or hop-by-hop field.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(encodeResponse(200, http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}}, []byte("body")))
	f.Add([]byte("shr\x01"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		status, h, body, err := decodeResponse(b)
		if err != nil {
			return
		}
		for k := range h {
			if !storedHeader(http.CanonicalHeaderKey(k), nil) {
				t.Fatalf("decoded forbidden field %q", k)
			}
		}
		s2, h2, b2, err := decodeResponse(encodeResponse(status, h, body))
		if err != nil || s2 != status || !bytes.Equal(b2, body) || len(h2) != len(h) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
