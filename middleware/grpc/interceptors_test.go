package guardgrpc

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestFillReply: the client interceptor fills the caller's reply from an
// entry of the reply's type only; any other entry leaves the reply reset,
// not half written, and the call goes to the server.
func TestFillReply(t *testing.T) {
	s, _ := proto.Marshal(wrapperspb.String("cached"))
	d, _ := proto.Marshal(durationpb.New(time.Second))
	const want = "google.protobuf.StringValue"
	for _, c := range []struct {
		name  string
		entry []byte
		ok    bool
	}{
		{"the reply's type", encodeValue(want, s), true},
		{"another type", encodeValue("google.protobuf.Duration", d), false},
		{"the reply's type, bytes of another", encodeValue(want, []byte{0xff}), false},
		{"garbage", []byte("garbage"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := wrapperspb.String("the caller's")
			err := fillReply(out, c.entry, want)
			if got := err == nil; got != c.ok {
				t.Fatalf("fillReply: %v, want success %v", err, c.ok)
			}
			wantValue := ""
			if c.ok {
				wantValue = "cached"
			}
			if got := out.GetValue(); got != wantValue {
				t.Errorf("reply %q, want %q", got, wantValue)
			}
		})
	}
}
