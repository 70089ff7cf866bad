package guardgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// TestColdNodeChecksMethodOutput: a node that has not answered a method
// yet decoded a stored answer by the type name in the entry, so an entry
// an older build wrote with another type was served as a hit: another
// message's bytes, with an OK status. Now, for a method protoregistry
// describes (generated code registers its files), the entry's type must
// be the method's output type, or the call bypasses the cache.
func TestColdNodeChecksMethodOutput(t *testing.T) {
	rdb := setup(t)
	ns := namespace(t)
	info := &grpc.UnaryServerInfo{FullMethod: healthpb.Health_Check_FullMethodName}
	req := &healthpb.HealthCheckRequest{Service: "x"}
	older := guardgrpc.UnaryServerInterceptor(newGroup(t, rdb, ns, guard.Hooks{}), guardgrpc.WithMethods(info.FullMethod))
	if _, err := older(t.Context(), req, info, func(context.Context, any) (any, error) {
		return wrapperspb.String("an older build's answer"), nil
	}); err != nil {
		t.Fatal(err)
	}
	fresh := guardgrpc.UnaryServerInterceptor(newGroup(t, rdb, ns, guard.Hooks{}), guardgrpc.WithMethods(info.FullMethod))
	ran := 0
	reply, err := fresh(t.Context(), req, info, func(context.Context, any) (any, error) {
		ran++
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reply.(*healthpb.HealthCheckResponse); !ok || ran != 1 {
		t.Errorf("a fresh node answered %T %v (%d handler runs); want its handler's HealthCheckResponse", reply, reply.(proto.Message), ran)
	}
}
