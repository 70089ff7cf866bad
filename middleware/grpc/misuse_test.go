package guardgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// builders build each interceptor with opts.
var builders = map[string]func(*guard.Group, ...guardgrpc.Option){
	"server": func(g *guard.Group, opts ...guardgrpc.Option) { guardgrpc.UnaryServerInterceptor(g, opts...) },
	"client": func(g *guard.Group, opts ...guardgrpc.Option) { guardgrpc.UnaryClientInterceptor(g, opts...) },
}

// panicOf returns the value f panicked with, or nil.
func panicOf(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// TestMisuse: every programmer error the interceptors can detect panics
// when the interceptor is built, with a message naming the package and the
// mistake, rather than caching nothing or failing every call later.
func TestMisuse(t *testing.T) {
	g := newGroup(t, setup(t), namespace(t), guard.Hooks{})
	keyFunc := func(context.Context, string, proto.Message) (string, bool) { return "k", true }
	get := guardgrpc.WithMethods(methodGet)
	tests := []struct {
		name string
		g    *guard.Group
		opts func() []guardgrpc.Option // built inside the recover
		want string                    // in the panic message
	}{
		{"nil group", nil, func() []guardgrpc.Option { return []guardgrpc.Option{get} }, "nil *guard.Group"},
		{"nil option", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, nil} }, "nil Option"},
		{"method without slashes", g, func() []guardgrpc.Option { return []guardgrpc.Option{guardgrpc.WithMethods("Check")} }, `"Check"`},
		{"method without leading slash", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{guardgrpc.WithMethods("grpc.health.v1.Health/Check")}
		}, "not a full method name"},
		{"method with a dot for the slash", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{guardgrpc.WithMethods("/grpc.health.v1.Health.Check")}
		}, "not a full method name"},
		{"method name empty", g, func() []guardgrpc.Option { return []guardgrpc.Option{guardgrpc.WithMethods("/pkg.Svc/")} }, "not a full method name"},
		{"service name empty", g, func() []guardgrpc.Option { return []guardgrpc.Option{guardgrpc.WithMethods("//Check")} }, "not a full method name"},
		{"method path too deep", g, func() []guardgrpc.Option { return []guardgrpc.Option{guardgrpc.WithMethods("/pkg.Svc/a/b")} }, "not a full method name"},
		{"method with a space", g, func() []guardgrpc.Option { return []guardgrpc.Option{guardgrpc.WithMethods("/pkg.Svc/Get ")} }, "not a full method name"},
		{"method empty", g, func() []guardgrpc.Option { return []guardgrpc.Option{guardgrpc.WithMethods("")} }, "not a full method name"},
		{"negative fresh", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithFreshFor(-time.Second)} }, "WithFreshFor(-1s)"},
		{"fresh Disabled", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithFreshFor(guard.Disabled)} }, "WithFreshFor"},
		{"negative stale", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithStaleFor(-time.Second)} }, "WithStaleFor(-1s)"},
		{"empty metadata key", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithMetadata("")} }, "WithMetadata"},
		{"metadata key with a space", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithMetadata("x tenant")} }, "not a metadata key"},
		{"metadata key with a star", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithMetadata("x-tenant*")} }, "not a metadata key"},
		{"empty ignored key", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithIgnoredMetadata("")} }, "WithIgnoredMetadata"},
		{"ignored key with a space", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{get, guardgrpc.WithIgnoredMetadata(" x-request-id")}
		}, "not a metadata key"},
		{"ignored prefix empty", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithIgnoredMetadata("-")} }, "not a metadata key"},
		{"authorization ignored", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{get, guardgrpc.WithIgnoredMetadata("Authorization")}
		}, "WithAllowAuthorization"},
		{"keyed and ignored", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{get, guardgrpc.WithMetadata("x-tenant"), guardgrpc.WithIgnoredMetadata("X-Tenant")}
		}, `"x-tenant"`},
		{"authorization keyed, not allowed", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{get, guardgrpc.WithMetadata("authorization")}
		}, "WithAllowAuthorization"},
		{"nil key func", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithKeyFunc(nil)} }, "WithKeyFunc(nil)"},
		{"nil unmatched hook", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithUnmatchedHook(nil)} }, "WithUnmatchedHook(nil)"},
		{"nil logger", g, func() []guardgrpc.Option { return []guardgrpc.Option{get, guardgrpc.WithLogger(nil)} }, "WithLogger(nil)"},
		{"key func and metadata", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{get, guardgrpc.WithKeyFunc(keyFunc), guardgrpc.WithMetadata("x-tenant")}
		}, "WithKeyFunc"},
		{"key func and ignored metadata", g, func() []guardgrpc.Option {
			return []guardgrpc.Option{get, guardgrpc.WithIgnoredMetadata("x-request-id"), guardgrpc.WithKeyFunc(keyFunc)}
		}, "WithKeyFunc"},
	}
	for _, tt := range tests {
		for side, build := range builders {
			t.Run(tt.name+"/"+side, func(t *testing.T) {
				p := panicOf(func() { build(tt.g, tt.opts()...) })
				msg := fmt.Sprint(p)
				if p == nil || !strings.HasPrefix(msg, "guardgrpc: ") || !strings.Contains(msg, tt.want) {
					t.Errorf("got panic %v, want one starting %q and holding %q", p, "guardgrpc: ", tt.want)
				}
			})
		}
	}
}

// TestOptionsAccepted: what the rules allow builds, and works: a call
// through each interceptor is answered and stored. The durations are the
// ones guard accepts, so a change there shows up here.
func TestOptionsAccepted(t *testing.T) {
	rdb := setup(t)
	keyFunc := func(_ context.Context, m string, req proto.Message) (string, bool) {
		return m + req.(*wrapperspb.StringValue).GetValue(), true
	}
	for _, tt := range []struct {
		name string
		opts []guardgrpc.Option
	}{
		{"fresh and stale", []guardgrpc.Option{guardgrpc.WithFreshFor(time.Minute), guardgrpc.WithStaleFor(time.Minute)}},
		{"zero durations keep the Group's", []guardgrpc.Option{guardgrpc.WithFreshFor(0), guardgrpc.WithStaleFor(0)}},
		{"stale Disabled", []guardgrpc.Option{guardgrpc.WithStaleFor(guard.Disabled)}},
		{"method without a package", []guardgrpc.Option{guardgrpc.WithMethods("/Svc/Get")}},
		{"metadata, any case", []guardgrpc.Option{guardgrpc.WithMetadata("X-Tenant", ":authority"), guardgrpc.WithIgnoredMetadata("X-Request-Id", "x-b3-*", "x-amz-", "*")}},
		{"authorization keyed and allowed", []guardgrpc.Option{guardgrpc.WithAllowAuthorization(), guardgrpc.WithMetadata("authorization")}},
		{"keyed wins over an ignored prefix", []guardgrpc.Option{guardgrpc.WithMetadata("x-tenant"), guardgrpc.WithIgnoredMetadata("x-*")}},
		{"key func", []guardgrpc.Option{guardgrpc.WithKeyFunc(keyFunc)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]guardgrpc.Option{guardgrpc.WithMethods(methodGet)}, tt.opts...)
			g := newGroup(t, rdb, namespace(t), guard.Hooks{})
			srv := &backend{fn: echo}
			conn := serve(t, srv, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, opts...)})
			if st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue)); err != nil || st != stored {
				t.Errorf("server: got %q, %v; want %q", st, err, stored)
			}
			cli := &backend{fn: echo}
			conn = serve(t, cli, nil, grpc.WithChainUnaryInterceptor(guardgrpc.UnaryClientInterceptor(g, opts...)))
			for i, want := range []string{stored, hit} {
				if st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue)); err != nil || st != want {
					t.Errorf("client call %d: got %q, %v; want %q", i, st, err, want)
				}
			}
			if got := cli.calls.Load(); got != 1 {
				t.Errorf("client: got %d server calls, want 1", got)
			}
		})
	}
}
