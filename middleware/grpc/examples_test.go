package guardgrpc_test

import (
	"context"
	"fmt"
	"net"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// newExampleGroup returns a Group over an embedded Redis; use your own.
func newExampleGroup() (*guard.Group, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		panic(err)
	}
	// ContextTimeoutEnabled lets guard.Options.RedisTimeout bound each call.
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	g, err := guard.New(rdb, guard.Options{})
	if err != nil {
		panic(err)
	}
	return g, func() { _ = g.Close(); _ = rdb.Close(); mr.Close() }
}

// greeter is a service registered by hand; generated code registers the
// same way, through RegisterXxxServer.
var (
	greeterCalls int
	greeter      = grpc.ServiceDesc{
		ServiceName: "greeter.Greeter",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Hello",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				hello := func(ctx context.Context, req any) (any, error) {
					greeterCalls++ // the example's calls are sequential
					name := req.(*wrapperspb.StringValue).GetValue()
					return wrapperspb.String(fmt.Sprintf("hello %s (call %d)", name, greeterCalls)), nil
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/greeter.Greeter/Hello"}, hello)
			},
		}},
	}
)

// serveExample serves greeter over an in-memory listener and dials it.
func serveExample(srv *grpc.Server, dial ...grpc.DialOption) (*grpc.ClientConn, func()) {
	srv.RegisterService(&greeter, nil)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///greeter", append(dial,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	return conn, func() { _ = conn.Close(); srv.Stop() }
}

func ExampleUnaryServerInterceptor() {
	g, stop := newExampleGroup()
	defer stop()
	greeterCalls = 0

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods("/greeter.Greeter/Hello")),
	))
	conn, done := serveExample(srv)
	defer done()

	for range 2 {
		var header metadata.MD
		reply := new(wrapperspb.StringValue)
		err := conn.Invoke(context.Background(), "/greeter.Greeter/Hello", wrapperspb.String("gopher"), reply, grpc.Header(&header))
		if err != nil {
			panic(err)
		}
		fmt.Println(reply.GetValue(), header.Get(guardgrpc.HeaderCacheStatus))
	}
	// Output:
	// hello gopher (call 1) [stampede; fwd=miss; stored]
	// hello gopher (call 1) [stampede; hit]
}

func ExampleUnaryClientInterceptor() {
	g, stop := newExampleGroup()
	defer stop()
	greeterCalls = 0

	conn, done := serveExample(
		grpc.NewServer(grpc.ChainUnaryInterceptor(passThrough)),
		grpc.WithChainUnaryInterceptor(
			guardgrpc.UnaryClientInterceptor(g, guardgrpc.WithMethods("/greeter.Greeter/Hello")),
		),
	)
	defer done()

	for range 2 {
		reply := new(wrapperspb.StringValue)
		if err := conn.Invoke(context.Background(), "/greeter.Greeter/Hello", wrapperspb.String("gopher"), reply); err != nil {
			panic(err)
		}
		fmt.Println(reply.GetValue())
	}
	fmt.Println("server calls:", greeterCalls)
	// Output:
	// hello gopher (call 1)
	// hello gopher (call 1)
	// server calls: 1
}

// passThrough stands for a server without the cache.
func passThrough(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}

// A method answering by tenant keys the tenant's metadata; an
// application's own correlation id, new on every call, is declared
// ignorable. Any other metadata (here a locale the handler might read)
// keeps the call from the cache.
func ExampleWithIgnoredMetadata() {
	g, stop := newExampleGroup()
	defer stop()
	greeterCalls = 0

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		guardgrpc.UnaryServerInterceptor(g,
			guardgrpc.WithMethods("/greeter.Greeter/Hello"),
			guardgrpc.WithMetadata("x-tenant"),
			guardgrpc.WithIgnoredMetadata("x-acme-correlation")),
	))
	conn, done := serveExample(srv)
	defer done()

	for _, md := range [][]string{
		{"x-tenant", "acme", "x-acme-correlation", "1"},
		{"x-tenant", "acme", "x-acme-correlation", "2"},
		{"x-tenant", "acme", "x-locale", "fr"},
	} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
		var header metadata.MD
		reply := new(wrapperspb.StringValue)
		if err := conn.Invoke(ctx, "/greeter.Greeter/Hello", wrapperspb.String("gopher"), reply, grpc.Header(&header)); err != nil {
			panic(err)
		}
		fmt.Println(reply.GetValue(), header.Get(guardgrpc.HeaderCacheStatus))
	}
	// Output:
	// hello gopher (call 1) [stampede; fwd=miss; stored]
	// hello gopher (call 1) [stampede; hit]
	// hello gopher (call 2) [stampede; fwd=bypass; detail=unkeyed-metadata]
}

// Behind Envoy or Istio, with OpenTelemetry: the ids and bookkeeping the
// mesh adds to every call are ignored, the forwarding entries it sets
// alike on every call are keyed and change nothing, and a bypass hook
// counts the calls that go past the cache, naming the entry that sent
// them there.
func ExampleWithBypassHook() {
	g, stop := newExampleGroup()
	defer stop()
	greeterCalls = 0

	bypassed := map[string]int{} // a metric, labelled by reason and key
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		guardgrpc.UnaryServerInterceptor(g,
			guardgrpc.WithMethods("/greeter.Greeter/Hello"),
			guardgrpc.WithBypassHook(func(_ context.Context, info guardgrpc.BypassInfo) {
				bypassed[string(info.Reason)+" "+info.Metadata]++ // the example's calls are sequential
			})),
	))
	conn, done := serveExample(srv)
	defer done()

	for i := range 3 {
		md := []string{
			"x-request-id", fmt.Sprint("req-", i),
			"traceparent", fmt.Sprintf("00-%032x-%016x-01", i+1, i+1),
			"x-envoy-attempt-count", "1",
			"x-forwarded-proto", "https",
		}
		if i == 2 {
			md = append(md, "x-locale", "fr")
		}
		ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
		reply := new(wrapperspb.StringValue)
		if err := conn.Invoke(ctx, "/greeter.Greeter/Hello", wrapperspb.String("gopher"), reply); err != nil {
			panic(err)
		}
		fmt.Println(reply.GetValue())
	}
	fmt.Println("bypassed:", bypassed)
	// Output:
	// hello gopher (call 1)
	// hello gopher (call 1)
	// hello gopher (call 2)
	// bypassed: map[unkeyed-metadata x-locale:1]
}
