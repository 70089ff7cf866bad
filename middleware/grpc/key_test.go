package guardgrpc

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestRequestKey(t *testing.T) {
	type in struct {
		method string
		req    string
		md     metadata.MD
		keys   []string
	}
	// Pairs that a plain concatenation would confuse.
	distinct := [][2]in{
		{{method: "/s/ab", req: "c"}, {method: "/s/a", req: "bc"}},
		{{method: "/s/m", req: "a", keys: []string{"k"}}, {method: "/s/m", req: "a", md: metadata.Pairs("k", ""), keys: []string{"k"}}},
		{{method: "/s/m", md: metadata.Pairs("k", "ab"), keys: []string{"k"}}, {method: "/s/m", md: metadata.Pairs("k", "a", "k", "b"), keys: []string{"k"}}},
		{{method: "/s/m", md: metadata.Pairs("k", "a", "k", "b"), keys: []string{"k"}}, {method: "/s/m", md: metadata.Pairs("k", "b", "k", "a"), keys: []string{"k"}}},
		{{method: "/s/m", md: metadata.Pairs("a", "1"), keys: []string{"a", "b"}}, {method: "/s/m", md: metadata.Pairs("b", "1"), keys: []string{"a", "b"}}},
	}
	key := func(x in) string { return requestKey(dest{}, x.method, []byte(x.req), x.md, x.keys, nil) }
	for i, p := range distinct {
		if a, b := key(p[0]), key(p[1]); a == b {
			t.Errorf("pair %d: same key %s for %+v and %+v", i, a, p[0], p[1])
		}
	}
	a := key(in{method: "/s/m", req: "x", md: metadata.Pairs("k", "v", "other", "1"), keys: []string{"k"}})
	b := key(in{method: "/s/m", req: "x", md: metadata.Pairs("k", "v", "other", "2"), keys: []string{"k"}})
	if a != b {
		t.Errorf("metadata not listed changed the key: %s, %s", a, b)
	}
	const v2 = "grpc:v2:" // the literal: a changed keyPrefix must fail here
	if !strings.HasPrefix(a, v2) || len(a) != len(v2)+64 {
		t.Errorf("got key %q, want %q and a SHA-256 in hex", a, v2)
	}
}

func TestWithMetadataNormalises(t *testing.T) {
	o := evaluateOptions([]Option{WithMetadata("X-B", "x-a"), WithMetadata("x-b")})
	if got := strings.Join(o.metadata, ","); got != "x-a,x-b" {
		t.Errorf("got %q, want %q", got, "x-a,x-b")
	}
}

func FuzzValue(f *testing.F) {
	f.Add("google.protobuf.StringValue", []byte("\x0a\x01a"))
	f.Add("a", []byte{})
	f.Add("", []byte{1, 2})
	f.Fuzz(func(t *testing.T, name string, msg []byte) {
		// Decoding arbitrary bytes must not panic.
		_, _, _ = decodeValue(msg)
		fn := protoreflect.FullName(name)
		if !fn.IsValid() {
			return
		}
		gotName, gotMsg, err := decodeValue(encodeValue(fn, msg))
		if err != nil || gotName != fn || !bytes.Equal(gotMsg, msg) {
			t.Fatalf("round trip of %q, %x: got %q, %x, %v", name, msg, gotName, gotMsg, err)
		}
	})
}

func TestDecodeType(t *testing.T) {
	c := &cache{o: evaluateOptions(nil)}
	s, _ := proto.Marshal(wrapperspb.String("x"))
	// No handler run yet: resolved by name through protoregistry.
	m, err := c.decode("/s/Get", encodeValue("google.protobuf.StringValue", s))
	if err != nil || m.(*wrapperspb.StringValue).GetValue() != "x" {
		t.Fatalf("got %v, %v; want StringValue x", m, err)
	}
	if _, err := c.decode("/s/Get", encodeValue("no.such.Type", s)); err == nil {
		t.Error("decoded a type the binary lacks")
	}
	// Once the handler answered with Duration, a StringValue entry of the
	// method (an older build's) is refused.
	if _, err := c.encode("/s/Get", durationpb.New(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.decode("/s/Get", encodeValue("google.protobuf.StringValue", s)); err == nil {
		t.Error("decoded an entry of another type than the method answers")
	}
	if _, err := c.decode("/s/Get", []byte("garbage")); err == nil {
		t.Error("decoded garbage")
	}
}

// FuzzRequestKey: two calls share a key exactly when their method, request
// bytes and listed metadata values (in order, absent apart from empty)
// agree; metadata not listed never matters.
func FuzzRequestKey(f *testing.F) {
	f.Add("/s/ab", []byte("c"), "x", true, "/s/a", []byte("bc"), "x", true)
	f.Add("/s/m", []byte("a"), "", false, "/s/m", []byte("a"), "", true)
	f.Add("/s/m", []byte{}, "ab", true, "/s/m", []byte{}, "a|b", true)
	f.Add("/s/m", []byte{}, "a|b", true, "/s/m", []byte{}, "b|a", true)
	f.Add("/s/m", []byte("r"), "v", true, "/s/m", []byte("r"), "v", true)
	f.Fuzz(func(t *testing.T, m1 string, r1 []byte, v1 string, has1 bool, m2 string, r2 []byte, v2 string, has2 bool) {
		md := func(v string, has bool) metadata.MD {
			md := metadata.MD{"other": {v + "!"}} // not listed: must not count
			if has {
				md["k"] = strings.Split(v, "|")
			}
			return md
		}
		md1, md2 := md(v1, has1), md(v2, has2)
		same := m1 == m2 && bytes.Equal(r1, r2) && has1 == has2 && slices.Equal(md1["k"], md2["k"])
		k1 := requestKey(dest{}, m1, r1, md1, []string{"k"}, nil)
		k2 := requestKey(dest{}, m2, r2, md2, []string{"k"}, nil)
		if (k1 == k2) != same {
			t.Fatalf("keys equal %v, inputs equal %v: %q %x %q %v / %q %x %q %v", k1 == k2, same, m1, r1, v1, has1, m2, r2, v2, has2)
		}
	})
}

// TestRequestKeyDest: a client key holds the server the call goes to; no
// two destinations, and no client and server, share a key.
func TestRequestKeyDest(t *testing.T) {
	dests := []dest{
		{},
		{client: true, target: "dns:///eu.example:443"},
		{client: true, target: "dns:///us.example:443"},
		{client: true, target: "dns:///eu.example:443", authority: "a.example"},
		{client: true, target: "dns:///eu.example:443a.example"},
		{client: true, target: "ab", authority: "c"},
		{client: true, target: "a", authority: "bc"},
	}
	seen := map[string]dest{}
	for _, d := range dests {
		for _, k := range []string{requestKey(d, "/s/m", []byte("x"), nil, nil, nil), funcKey(d, "user-key")} {
			if prev, ok := seen[k]; ok {
				t.Errorf("%+v and %+v share key %s", prev, d, k)
			}
			seen[k] = d
		}
	}
	if got := funcKey(dest{}, "user-key"); got != "user-key" {
		t.Errorf("server KeyFunc key: got %q, want it as it is", got)
	}
}
