package httpcache

import (
	"bytes"
	"net/http"
	"testing"
)

// FuzzDecodeResponse: decoding never panics, and what decodes re-encodes to
// an entry that decodes alike with no Set-Cookie or hop-by-hop field, whose
// head is everything before the body.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(encodeResponse(200, 7, http.Header{"Content-Type": {"text/plain"}, "X-A": {"1", "2"}}, []byte("body")))
	f.Add([]byte("shr\x02"))
	f.Add([]byte("shr\x01\xc8\x01\x00\x00"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sr, err := decodeResponse(b)
		if err != nil {
			return
		}
		for k := range sr.header() {
			if !storedHeader(http.CanonicalHeaderKey(k), nil) {
				t.Fatalf("decoded forbidden field %q", k)
			}
		}
		if !bytes.Equal(b[sr.headLen:], sr.body) {
			t.Fatalf("head length %d does not end where the body starts", sr.headLen)
		}
		re := encodeResponse(sr.status, sr.initialAge, sr.header(), sr.body)
		sr2, err := decodeResponse(re)
		if err != nil || sr2.status != sr.status || sr2.initialAge != sr.initialAge || !bytes.Equal(sr2.body, sr.body) || len(sr2.fields) != len(sr.fields) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// TestEncodeHead: a head is exactly what precedes the body, so a
// revalidation can replace it alone.
func TestEncodeHead(t *testing.T) {
	h := http.Header{"Etag": {`"a"`}, "Connection": {"X-Hop"}, "X-Hop": {"1"}, "Set-Cookie": {"s=1"}}
	body := []byte("the body")
	full := encodeResponse(200, 4, h, body)
	head := encodeHead(200, 4, h, len(body))
	if !bytes.Equal(full[:len(head)], head) || !bytes.Equal(full[len(head):], body) {
		t.Fatalf("head %q is not the prefix of %q before the body", head, full)
	}
	sr, err := decodeResponse(full)
	if err != nil || sr.headLen != len(head) {
		t.Fatalf("decode: %v, head length %d, want %d", err, sr.headLen, len(head))
	}
	if sr.get("X-Hop") != nil {
		t.Error("a field named in Connection was stored")
	}
}
