package guardgrpc_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// TestServerAuthority: :authority, the name a client dialled, is keyed by
// default, as the HTTP engine keys Host: a server answering by it (one
// tenant per name) never serves one name's answer to another. It was
// ignored, and a call to b.example got a.example's answer, a hit. Ignored
// when named, for a server whose answers do not depend on the name.
func TestServerAuthority(t *testing.T) {
	rdb := setup(t)
	for _, tt := range []struct {
		name       string
		opts       []guardgrpc.Option
		wantSecond string
	}{
		{"keyed by default", nil, stored},
		{"keyed with WithMetadata", []guardgrpc.Option{guardgrpc.WithMetadata(":authority")}, stored},
		{"keyed with WithUnkeyedForwarding", []guardgrpc.Option{guardgrpc.WithUnkeyedForwarding()}, stored},
		{"ignored with WithIgnoredMetadata", []guardgrpc.Option{guardgrpc.WithIgnoredMetadata(":authority")}, hit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &backend{fn: echo}
			g := newGroup(t, rdb, namespace(t), guard.Hooks{})
			icpt := guardgrpc.UnaryServerInterceptor(g, append(tt.opts, guardgrpc.WithMethods(methodGet))...)
			var got []string
			for _, authority := range []string{"a.example", "b.example"} {
				conn := serve(t, b, []grpc.UnaryServerInterceptor{icpt}, grpc.WithAuthority(authority))
				st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("x"), new(wrapperspb.StringValue))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, st)
			}
			if got[0] != stored || got[1] != tt.wantSecond {
				t.Errorf("cache-status %q, want %q then %q", got, stored, tt.wantSecond)
			}
		})
	}
}
