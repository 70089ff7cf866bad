package guardgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// region answers "<region>:<request>#<handler run>".
func region(name string) *backend {
	return &backend{fn: func(_ context.Context, _ string, req proto.Message, n int64) (proto.Message, error) {
		return wrapperspb.String(fmt.Sprintf("%s:%s#%d", name, req.(*wrapperspb.StringValue).GetValue(), n)), nil
	}}
}

// TestClientKeyHoldsTarget: one Group, one client interceptor, two
// connections to two servers answering differently. Each connection gets
// its own server's reply, and each server is called once.
func TestClientKeyHoldsTarget(t *testing.T) {
	rdb := setup(t)
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	icpt := guardgrpc.UnaryClientInterceptor(g, guardgrpc.WithMethods(methodGet))
	eu, us := region("eu"), region("us")
	conns := map[string]*grpc.ClientConn{
		"eu": serve(t, eu, nil, grpc.WithChainUnaryInterceptor(icpt)),
		"us": serve(t, us, nil, grpc.WithChainUnaryInterceptor(icpt)),
	}
	for round, want := range []string{stored, hit} {
		for _, name := range []string{"eu", "us"} {
			var hdr metadata.MD
			reply := new(wrapperspb.StringValue)
			if err := conns[name].Invoke(t.Context(), methodGet, wrapperspb.String("a"), reply, grpc.Header(&hdr)); err != nil {
				t.Fatal(err)
			}
			if got, wantReply := reply.GetValue(), name+":a#1"; got != wantReply {
				t.Errorf("round %d, %s connection: got reply %q, want %q", round, name, got, wantReply)
			}
			if got := hdr.Get(guardgrpc.HeaderCacheStatus); len(got) != 1 || got[0] != want {
				t.Errorf("round %d, %s connection: got cache-status %v, want %q", round, name, got, want)
			}
		}
	}
	if e, u := eu.calls.Load(), us.calls.Load(); e != 1 || u != 1 {
		t.Errorf("got %d EU and %d US server calls, want 1 each", e, u)
	}
}

// TestClientKeyHoldsCallAuthority: a call sent with grpc.CallAuthority
// reaches the server under that name; a server answering by :authority
// (virtual hosting) answers each name apart, so the key holds it.
func TestClientKeyHoldsCallAuthority(t *testing.T) {
	rdb := setup(t)
	b := &backend{fn: func(ctx context.Context, _ string, req proto.Message, n int64) (proto.Message, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return wrapperspb.String(fmt.Sprintf("%s:%s#%d", strings.Join(md.Get(":authority"), ","), req.(*wrapperspb.StringValue).GetValue(), n)), nil
	}}
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	conn := serve(t, b, nil, grpc.WithChainUnaryInterceptor(guardgrpc.UnaryClientInterceptor(g, guardgrpc.WithMethods(methodGet))))
	replies := map[string]string{}
	for range 2 {
		for _, authority := range []string{"a.example", "b.example", ""} {
			var opts []grpc.CallOption
			if authority != "" {
				opts = append(opts, grpc.CallAuthority(authority))
			}
			reply := new(wrapperspb.StringValue)
			if err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("x"), reply, opts...); err != nil {
				t.Fatal(err)
			}
			if prev, ok := replies[authority]; ok && prev != reply.GetValue() {
				t.Errorf("authority %q: got %q, then %q", authority, prev, reply.GetValue())
			}
			replies[authority] = reply.GetValue()
		}
	}
	for _, authority := range []string{"a.example", "b.example"} {
		if want := authority + ":x#"; !strings.HasPrefix(replies[authority], want) {
			t.Errorf("authority %q: got reply %q, want one from %q", authority, replies[authority], want)
		}
	}
	if got := b.calls.Load(); got != 3 {
		t.Errorf("got %d server calls for 3 authorities called twice, want 3", got)
	}
}
