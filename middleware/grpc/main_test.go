package guardgrpc_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A test service registered from a hand-written ServiceDesc: no generated
// code, so no method descriptors in protoregistry either.
const service = "stampede.test.Echo"

const (
	methodGet      = "/" + service + "/Get"      // StringValue → StringValue
	methodOther    = "/" + service + "/Other"    // StringValue → StringValue
	methodStruct   = "/" + service + "/Struct"   // Struct → StringValue
	methodDuration = "/" + service + "/Duration" // Duration → StringValue
)

// backend is the service implementation: fn answers every method; calls
// counts the handler runs.
type backend struct {
	calls atomic.Int64
	fn    func(ctx context.Context, method string, req proto.Message, n int64) (proto.Message, error)
}

func (b *backend) desc() *grpc.ServiceDesc {
	method := func(name string, newReq func() proto.Message) grpc.MethodDesc {
		full := "/" + service + "/" + name
		return grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := newReq()
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) {
					n := b.calls.Add(1)
					resp, err := b.fn(ctx, full, req.(proto.Message), n)
					if err != nil {
						return nil, err
					}
					return resp, nil
				}
				if icpt == nil {
					return h(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, h)
			},
		}
	}
	return &grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			method("Get", func() proto.Message { return new(wrapperspb.StringValue) }),
			method("Other", func() proto.Message { return new(wrapperspb.StringValue) }),
			method("Struct", func() proto.Message { return new(structpb.Struct) }),
			method("Duration", func() proto.Message { return new(durationpb.Duration) }),
		},
	}
}

// serve starts a loopback gRPC server for b with the interceptors and
// returns a client connection to it; both end with the test.
func serve(t *testing.T, b *backend, icpts []grpc.UnaryServerInterceptor, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	return dial(t, listen(t, b, icpts), dialOpts...)
}

// listen starts a loopback gRPC server for b with the interceptors, stopped
// when the test ends, and returns its address.
func listen(t *testing.T, b *backend, icpts []grpc.UnaryServerInterceptor) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpts...))
	srv.RegisterService(b.desc(), b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial returns a client connection to addr, closed when the test ends.
func dial(t *testing.T, addr string, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	// Every node by one name, as clients reach a fleet by its service's
	// name: :authority is keyed (TestServerAuthority), and each loopback
	// server's own address would split the fleet. A dial option of the
	// test's own comes later and wins.
	conn, err := grpc.NewClient(addr,
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(fleetAuthority)}, dialOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// fleetAuthority is the name the tests' clients dial every server by.
const fleetAuthority = "fleet.example"

// setup returns a client of the shared real Redis and checks, when the
// test ends, that it leaked no goroutine.
func setup(t *testing.T) *redis.Client {
	t.Helper()
	srv := redistest.Shared(t)
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	return srv.Client(t)
}

// newGroup returns a Group closed when the test ends.
func newGroup(t *testing.T, rdb redis.UniversalClient, ns string, hooks guard.Hooks) *guard.Group {
	t.Helper()
	// A generous RedisTimeout: a loaded machine must not turn an answer
	// into a degraded one.
	g, err := guard.New(rdb, guard.Options{Namespace: ns, Hooks: hooks, RedisTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// namespace is a guard namespace no other test uses.
func namespace(t *testing.T) string {
	return "gt:" + strings.NewReplacer("{", "(", "}", ")").Replace(redistest.Key(t)) + ":"
}

// invoke calls method and returns the cache-status header.
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, req, reply proto.Message, md ...string) (string, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var hdr metadata.MD
	err := conn.Invoke(ctx, method, req, reply, grpc.Header(&hdr))
	return strings.Join(hdr.Get("cache-status"), ","), err
}

// countMisses returns hooks counting the guard's misses and a channel
// closed once n misses were seen.
func countMisses(n int64) (guard.Hooks, <-chan struct{}) {
	var seen atomic.Int64
	all := make(chan struct{})
	return guard.Hooks{Miss: func(string) {
		if seen.Add(1) == n {
			close(all)
		}
	}}, all
}
