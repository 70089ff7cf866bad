package guardgrpc

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// keyPrefix names the key format. Change the version whenever the encoding
// below changes, so old entries are never read under new keys.
const keyPrefix = "grpc:v2:"

// dest is the server a client call is sent to; the zero dest stands for
// the server interceptor, which answers its calls itself.
type dest struct {
	client    bool
	target    string // the connection's canonical target
	authority string // a grpc.CallAuthority override, or ""
}

// destOf returns where a client call on cc with opts goes. grpc-go does
// not expose the authority a connection was dialled with (grpc.WithAuthority,
// a TLS ServerName): the package doc says what that means for the key.
func destOf(cc *grpc.ClientConn, opts []grpc.CallOption) dest {
	d := dest{client: true, target: cc.CanonicalTarget()}
	for _, o := range opts {
		// As grpc applies call options in order, the last one wins.
		switch o := o.(type) {
		case grpc.AuthorityOverrideCallOption:
			d.authority = o.Authority
		case *grpc.AuthorityOverrideCallOption:
			d.authority = o.Authority
		}
	}
	return d
}

// writeDest starts a key's input: whose key it is, and for a client call,
// the server it goes to. Server and client keys never coincide, though
// they share a Group.
func writeDest(h hash.Hash, d dest) {
	if !d.client {
		writeField(h, []byte("server"))
		return
	}
	writeField(h, []byte("client"))
	writeField(h, []byte(d.target))
	writeField(h, []byte(d.authority))
}

// requestKey is the default key of a call: where it goes (dest), the
// method, the request's deterministic proto bytes, the values of the
// allow-listed metadata keys (keys, each whether present or not), then
// the names and values of the metadata keyed by default that the call
// carries (present, sorted), each length-prefixed (so no two different
// inputs encode alike), then hashed. Metadata values keep their order; an
// absent key and a key with an empty value differ.
func requestKey(d dest, fullMethod string, req []byte, md metadata.MD, keys, present []string) string {
	h := sha256.New()
	writeDest(h, d)
	writeField(h, []byte(fullMethod))
	writeField(h, req)
	writeMetadata(h, md, keys)
	writeMetadata(h, md, present)
	return keyPrefix + hex.EncodeToString(h.Sum(nil))
}

// funcKey is the key of a call keyed by a KeyFunc: the KeyFunc's key as
// it is on the server; on the client, scoped to the call's server, which
// a KeyFunc cannot see.
func funcKey(d dest, key string) string {
	if !d.client {
		return key
	}
	h := sha256.New()
	writeDest(h, d)
	writeField(h, []byte(key))
	return keyPrefix + "func:" + hex.EncodeToString(h.Sum(nil))
}

func writeMetadata(h hash.Hash, md metadata.MD, keys []string) {
	writeLen(h, len(keys))
	for _, k := range keys {
		vs := md[k]
		writeField(h, []byte(k))
		writeLen(h, len(vs))
		for _, v := range vs {
			writeField(h, []byte(v))
		}
	}
}

func writeLen(h hash.Hash, n int) {
	var b [binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], uint64(n))])
}

func writeField(h hash.Hash, p []byte) {
	writeLen(h, len(p))
	h.Write(p)
}
