package guardgrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
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

// TestGarbageDropOutlivesItsCall: the drop that the calls finding garbage
// share runs without the cancellation of the call that started it: that
// caller leaving does not leave the garbage in place, and the calls that
// joined it without their refill.
func TestGarbageDropOutlivesItsCall(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	const key = "k"
	garbage := []byte("garbage")
	if _, err := g.Do(context.Background(), key, func(context.Context) ([]byte, error) { return garbage, nil }); err != nil {
		t.Fatal(err)
	}
	c := newCache(g, []Option{WithMethods("/svc/M")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the first caller left
	if !c.dropGarbage(ctx, key, garbage, errBadValue) {
		t.Fatal("the drop gave up with its first call's context")
	}
	if res, err := g.Peek(context.Background(), key); !errors.Is(err, guard.ErrNotCached) {
		t.Errorf("after the drop: %q %v, want ErrNotCached", res.Value, err)
	}
}
