package guardgrpc

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"google.golang.org/grpc/metadata"
)

// keyPrefix names the key format. Change the version whenever the encoding
// below changes, so old entries are never read under new keys.
const keyPrefix = "grpc:v1:"

// requestKey is the default key of a call: the method, the request's
// deterministic proto bytes and the values of the allow-listed metadata
// keys, each length-prefixed (so no two different inputs encode alike),
// then hashed. Metadata values keep their order; an absent key and a key
// with an empty value differ.
func requestKey(fullMethod string, req []byte, md metadata.MD, keys []string) string {
	h := sha256.New()
	writeField(h, []byte(fullMethod))
	writeField(h, req)
	writeLen(h, len(keys))
	for _, k := range keys {
		vs := md[k]
		writeField(h, []byte(k))
		writeLen(h, len(vs))
		for _, v := range vs {
			writeField(h, []byte(v))
		}
	}
	return keyPrefix + hex.EncodeToString(h.Sum(nil))
}

func writeLen(h hash.Hash, n int) {
	var b [binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], uint64(n))])
}

func writeField(h hash.Hash, p []byte) {
	writeLen(h, len(p))
	h.Write(p)
}
