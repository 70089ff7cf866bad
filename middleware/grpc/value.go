package guardgrpc

import (
	"encoding/binary"
	"errors"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// valueVersion is the first byte of every cached answer.
const valueVersion = 1

// encodeValue stores an answer as its message's full name and its proto
// bytes: "\x01" uvarint(len(name)) name bytes. The name lets any node
// decode the answer, also one whose handler has not run yet.
func encodeValue(name protoreflect.FullName, msg []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+len(msg))
	b = append(b, valueVersion)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, msg...)
}

var errBadValue = errors.New("guardgrpc: undecodable cached answer")

// decodeValue splits a cached answer. msg aliases v.
func decodeValue(v []byte) (name protoreflect.FullName, msg []byte, err error) {
	if len(v) == 0 || v[0] != valueVersion {
		return "", nil, errBadValue
	}
	n, w := binary.Uvarint(v[1:])
	if w <= 0 || n > uint64(len(v)-1-w) {
		return "", nil, errBadValue
	}
	rest := v[1+w:]
	name = protoreflect.FullName(rest[:n])
	if !name.IsValid() {
		return "", nil, errBadValue
	}
	return name, rest[n:], nil
}
