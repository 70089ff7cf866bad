package guardgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// A name given to WithMethods that is well formed but wrong matches no
// call, and nothing is cached: CheckMethods finds it once the services are
// registered, before the server starts.
func ExampleCheckMethods() {
	srv := grpc.NewServer()
	srv.RegisterService(&greeter, nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())

	fmt.Println(guardgrpc.CheckMethods(srv, "/greeter.Greeter/Hello", "/grpc.health.v1.Health/Check"))

	err := guardgrpc.CheckMethods(srv,
		"/greeter.v1.Greeter/Hello",    // the package is wrong
		"/grpc.health.v1.Health/Watch", // a stream
		"/greeter.Greeter/Goodbye",     // no such method
	)
	fmt.Println(errors.Is(err, guardgrpc.ErrNotServed))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// guardgrpc: not served: /greeter.v1.Greeter/Hello (did you mean /greeter.Greeter/Hello?)
	// guardgrpc: not served: /grpc.health.v1.Health/Watch (a streaming method: the unary interceptors never see it)
	// guardgrpc: not served: /greeter.Greeter/Goodbye (greeter.Greeter has no method Goodbye; it has Hello)
}

// While the server runs, a listed method that no call matches is logged
// (and reported to WithUnmatchedHook) once: here at the first call of the
// method it was probably meant to be.
func ExampleWithLogger() {
	g, stop := newExampleGroup()
	defer stop()
	// A logger without timestamps, for the example's output.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))

	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		guardgrpc.UnaryServerInterceptor(g,
			guardgrpc.WithMethods("/greeter.v1.Greeter/Hello"), // the service is in package greeter
			guardgrpc.WithLogger(logger)),
	))
	conn, done := serveExample(srv)
	defer done()

	for range 2 {
		reply := new(wrapperspb.StringValue)
		if err := conn.Invoke(context.Background(), "/greeter.Greeter/Hello", wrapperspb.String("gopher"), reply); err != nil {
			panic(err)
		}
	}
	// Output:
	// level=WARN msg="stampede: a method listed with WithMethods is never called; nothing is cached for it" method=/greeter.v1.Greeter/Hello other_calls=1 called=/greeter.Greeter/Hello
}
