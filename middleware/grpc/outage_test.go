package guardgrpc_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/outagetest"
	"github.com/stampede-go/stampede/internal/redistest"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// TestRedisOutageServesFromMemory: three gRPC servers with the server
// interceptor on three nodes, paced calls of 20 requests, Redis killed for
// 6s: each node answers from memory, no call fails, and the handler runs
// per request and node at most once per FreshFor; then once per request
// and refresh across the fleet again.
func TestRedisOutageServesFromMemory(t *testing.T) {
	srv := redistest.Start(t)
	var loads atomic.Int64
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
		loads.Add(1)
		time.Sleep(20 * time.Millisecond) // the origin's query
		return wrapperspb.String("item " + req.(*wrapperspb.StringValue).GetValue()), nil
	}}
	s := outagetest.Scenario{Nodes: 3, Keys: 20, FreshFor: 2 * time.Second, Outage: 6 * time.Second,
		Callers: 24, Pace: 5 * time.Millisecond, Loads: &loads}
	hits := &outagetest.LocalHits{}
	ns := namespace(t)
	var conns []*grpc.ClientConn
	for i := range s.Nodes {
		g, err := guard.New(srv.Client(t), guard.Options{Namespace: ns, FreshFor: s.FreshFor, StaleFor: time.Minute,
			RedisTimeout: 250 * time.Millisecond, Hooks: guard.Hooks{Hit: hits.Hook(i)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		conns = append(conns, serve(t, b, []grpc.UnaryServerInterceptor{
			guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet)),
		}))
	}
	s.Held = func() bool { return hits.Held(s.Nodes, s.Keys) }
	s.Call = func(ctx context.Context, node, key int) error {
		reply := new(wrapperspb.StringValue)
		st, err := invoke(ctx, conns[node], methodGet, wrapperspb.String(strconv.Itoa(key)), reply)
		if err != nil {
			return err
		}
		if want := "item " + strconv.Itoa(key); reply.GetValue() != want {
			return fmt.Errorf("reply %q (cache-status %q), want %q", reply.GetValue(), st, want)
		}
		if !strings.HasPrefix(st, "stampede;") {
			return fmt.Errorf("no cache-status: %q", st)
		}
		return nil
	}
	s.Check(t, outagetest.Run(t, srv, s))
}
