package guardgrpc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// TestCheckMethods: against a real server's registered services, a listed
// name that is well formed but wrong is named, with the method it probably
// meant; the names the server serves as unary methods pass.
func TestCheckMethods(t *testing.T) {
	b := &backend{}
	srv := grpc.NewServer()
	srv.RegisterService(b.desc(), b)
	healthpb.RegisterHealthServer(srv, health.NewServer())

	if err := guardgrpc.CheckMethods(srv, methodGet, methodOther, "/grpc.health.v1.Health/Check"); err != nil {
		t.Errorf("served methods: %v, want nil", err)
	}
	rows := []struct{ method, want string }{
		{"/stampede.Echo/Get", "did you mean " + methodGet + "?"},
		{"/stampede.test.v1.Echo/Other", "did you mean " + methodOther + "?"},
		{"/stampede.test.Echo/Gett", "stampede.test.Echo has no method Gett; it has Duration, Get, Other, Struct"},
		{"/catalog.v1.Catalog/GetProduct", "no service catalog.v1.Catalog is registered"},
		{"/grpc.health.v1.Health/Watch", "a streaming method"},
	}
	for _, row := range rows {
		err := guardgrpc.CheckMethods(srv, methodGet, row.method)
		if !errors.Is(err, guardgrpc.ErrNotServed) || !strings.Contains(err.Error(), row.method+" ("+row.want) {
			t.Errorf("CheckMethods(%s): %v, want ErrNotServed naming it: %s", row.method, err, row.want)
		}
		if err != nil && strings.Contains(err.Error(), methodGet+" (") {
			t.Errorf("CheckMethods(%s): %v names %s, which is served", row.method, err, methodGet)
		}
	}
}

// TestUnmatchedMethod: on a real server over loopback, through either
// interceptor, a listed method no call matches is reported once to the
// hook and the logger: at the first call of the same service and method
// in another package, else after 1,000 calls of other methods; a method
// that calls match is never reported.
func TestUnmatchedMethod(t *testing.T) {
	type call struct {
		method string
		n      int
	}
	rows := []struct {
		name   string
		listed []string
		calls  []call
		want   []guardgrpc.UnmatchedMethod // after all the calls
		before []call                      // calls after which nothing is reported yet
	}{
		{
			name:   "another package",
			listed: []string{"/stampede.Echo/Get", methodOther},
			before: []call{{methodOther, 1}},
			calls:  []call{{methodGet, 3}},
			want:   []guardgrpc.UnmatchedMethod{{FullMethod: "/stampede.Echo/Get", Called: methodGet, OtherCalls: 1}},
		},
		{
			name:   "no call in 1,000",
			listed: []string{methodGet, "/stampede.test.Echo/Gett"},
			before: []call{{methodGet, 1}, {methodOther, 999}},
			calls:  []call{{methodOther, 5}},
			want:   []guardgrpc.UnmatchedMethod{{FullMethod: "/stampede.test.Echo/Gett", OtherCalls: 1000}},
		},
		{
			name:   "every listed method called",
			listed: []string{methodGet},
			calls:  []call{{methodGet, 1}, {methodOther, 1001}},
		},
	}
	for _, side := range []string{"server", "client"} {
		for _, row := range rows {
			t.Run(side+"/"+row.name, func(t *testing.T) {
				g := newGroup(t, setup(t), namespace(t), guard.Hooks{})
				var mu sync.Mutex
				var got []guardgrpc.UnmatchedMethod
				var logs bytes.Buffer
				opts := []guardgrpc.Option{
					guardgrpc.WithMethods(row.listed...),
					guardgrpc.WithUnmatchedHook(func(_ context.Context, u guardgrpc.UnmatchedMethod) {
						mu.Lock()
						defer mu.Unlock()
						got = append(got, u)
					}),
					guardgrpc.WithLogger(slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil))),
				}
				b := &backend{fn: func(_ context.Context, _ string, req proto.Message, _ int64) (proto.Message, error) {
					return req, nil
				}}
				var conn *grpc.ClientConn
				if side == "server" {
					conn = serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, opts...)})
				} else {
					conn = dial(t, listen(t, b, nil), grpc.WithChainUnaryInterceptor(guardgrpc.UnaryClientInterceptor(g, opts...)))
				}
				do := func(calls []call) {
					for _, c := range calls {
						for range c.n {
							if _, err := invoke(t.Context(), conn, c.method, wrapperspb.String("x"), new(wrapperspb.StringValue)); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				do(row.before)
				mu.Lock()
				if len(got) > 0 {
					t.Errorf("reported %+v before the call that reveals it", got)
				}
				mu.Unlock()
				do(row.calls)
				mu.Lock()
				defer mu.Unlock()
				if !slices.Equal(got, row.want) {
					t.Errorf("reported %+v, want %+v", got, row.want)
				}
				if n := strings.Count(logs.String(), "level=WARN"); n != len(row.want) {
					t.Errorf("%d warnings logged, want %d:\n%s", n, len(row.want), logs.String())
				}
				for _, u := range row.want {
					if !strings.Contains(logs.String(), "method="+u.FullMethod) {
						t.Errorf("log does not name %s:\n%s", u.FullMethod, logs.String())
					}
				}
			})
		}
	}
}

// syncWriter serializes writes to w with mu, which the test holds to read.
type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
