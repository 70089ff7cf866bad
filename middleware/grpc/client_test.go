package guardgrpc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// token is per-call credentials that need no transport security.
type token string

func (t token) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (token) RequireTransportSecurity() bool { return false }

func TestClientInterceptor(t *testing.T) {
	rdb := setup(t)

	type call struct {
		req        string
		md         []string
		opts       []grpc.CallOption
		prefill    string // the reply's value before the call
		wantCode   codes.Code
		wantReply  string
		wantMsg    string
		wantStatus string // the cache-status grpc.Header receives
	}
	tests := []struct {
		name       string
		opts       []guardgrpc.Option
		method     string
		handler    func(context.Context, string, proto.Message, int64) (proto.Message, error)
		calls      []call
		wantServer int64
	}{
		{
			name: "ok reply cached",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: stored},
				{req: "a", prefill: "junk", wantReply: "a#1", wantStatus: hit},
				{req: "b", wantReply: "b#2", wantStatus: stored},
				{req: "a", wantReply: "a#1", wantStatus: hit},
			},
			wantServer: 2,
		},
		{
			name: "reply reset before filled",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			handler: func(context.Context, string, proto.Message, int64) (proto.Message, error) {
				return wrapperspb.String(""), nil
			},
			calls: []call{
				{req: "a", prefill: "junk", wantReply: "", wantStatus: stored},
				{req: "a", prefill: "junk", wantReply: "", wantStatus: hit},
			},
			wantServer: 1,
		},
		{
			name:   "method not listed",
			opts:   []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			method: methodOther,
			calls: []call{
				{req: "a", wantReply: "a#1"},
				{req: "a", wantReply: "a#2"},
			},
			wantServer: 2,
		},
		{
			name: "errors not cached",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithNegativeNotFound()},
			handler: func(_ context.Context, _ string, _ proto.Message, n int64) (proto.Message, error) {
				return nil, status.Errorf(codes.ResourceExhausted, "busy #%d", n)
			},
			calls: []call{
				{req: "a", wantCode: codes.ResourceExhausted, wantMsg: "busy #1", wantStatus: miss},
				{req: "a", wantCode: codes.ResourceExhausted, wantMsg: "busy #2", wantStatus: miss},
			},
			wantServer: 2,
		},
		{
			name: "not found negative-cached with option",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithNegativeNotFound()},
			handler: func(_ context.Context, _ string, _ proto.Message, n int64) (proto.Message, error) {
				return nil, status.Errorf(codes.NotFound, "gone #%d", n)
			},
			calls: []call{
				{req: "a", wantCode: codes.NotFound, wantMsg: "gone #1", wantStatus: miss},
				{req: "a", wantCode: codes.NotFound, wantMsg: "guardgrpc: not found (cached)", wantStatus: hit},
			},
			wantServer: 1,
		},
		{
			name: "listed metadata splits keys",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithMetadata("x-tenant"), guardgrpc.WithIgnoredMetadata("x-trace")},
			calls: []call{
				{req: "a", md: []string{"x-tenant", "t1"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t2"}, wantReply: "a#2", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t1", "x-trace", "9"}, wantReply: "a#1", wantStatus: hit},
			},
			wantServer: 2,
		},
		{
			name: "metadata neither listed nor ignorable bypasses",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithMetadata("x-tenant")},
			calls: []call{
				{req: "a", md: []string{"x-locale", "fr"}, wantReply: "a#1"},
				{req: "a", md: []string{"x-tenant", "t1"}, wantReply: "a#2", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t1", "x-locale", "de"}, wantReply: "a#3"},
				{req: "a", md: []string{"x-tenant", "t1"}, wantReply: "a#2", wantStatus: hit},
			},
			wantServer: 3,
		},
		{
			name: "authorization bypasses",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			calls: []call{
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#1"},
				{req: "a", opts: []grpc.CallOption{grpc.PerRPCCredentials(token("x"))}, wantReply: "a#2"},
				{req: "a", wantReply: "a#3", wantStatus: stored},
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#4"},
			},
			wantServer: 4,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &backend{fn: echo}
			if tt.handler != nil {
				b.fn = tt.handler
			}
			g := newGroup(t, rdb, namespace(t), guard.Hooks{})
			conn := serve(t, b, nil, grpc.WithChainUnaryInterceptor(guardgrpc.UnaryClientInterceptor(g, tt.opts...)))
			method := tt.method
			if method == "" {
				method = methodGet
			}
			for i, c := range tt.calls {
				ctx := t.Context()
				if len(c.md) > 0 {
					ctx = metadata.AppendToOutgoingContext(ctx, c.md...)
				}
				var hdr metadata.MD
				reply := wrapperspb.String(c.prefill)
				err := conn.Invoke(ctx, method, wrapperspb.String(c.req), reply, append(c.opts, grpc.Header(&hdr))...)
				s := status.Convert(err)
				if s.Code() != c.wantCode {
					t.Fatalf("call %d: got %v, want code %v", i, err, c.wantCode)
				}
				if c.wantCode == codes.OK && reply.GetValue() != c.wantReply {
					t.Errorf("call %d: got reply %q, want %q", i, reply.GetValue(), c.wantReply)
				}
				if c.wantCode != codes.OK && s.Message() != c.wantMsg {
					t.Errorf("call %d: got message %q, want %q", i, s.Message(), c.wantMsg)
				}
				if got := fmt.Sprint(hdr.Get(guardgrpc.HeaderCacheStatus)); got != fmt.Sprint(nonEmpty(c.wantStatus)) {
					t.Errorf("call %d: got cache-status %s, want %q", i, got, c.wantStatus)
				}
			}
			if got := b.calls.Load(); got != tt.wantServer {
				t.Errorf("got %d server calls, want %d", got, tt.wantServer)
			}
		})
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// TestClientCoalescing runs concurrent calls of one key from two clients
// of one server, each with its own Group over one real Redis: the server
// sees one call and every caller's reply is filled.
func TestClientCoalescing(t *testing.T) {
	rdb := setup(t)
	const perClient = 8
	hooks, allMissed := countMisses(2 * perClient)
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
		<-allMissed
		return echo(ctx, m, req, n)
	}}
	ns := namespace(t)
	addr := listen(t, b, nil)
	var conns []*grpc.ClientConn
	for range 2 {
		g := newGroup(t, rdb, ns, hooks)
		conns = append(conns, dial(t, addr, grpc.WithChainUnaryInterceptor(
			guardgrpc.UnaryClientInterceptor(g, guardgrpc.WithMethods(methodGet)))))
	}
	var wg sync.WaitGroup
	replies := make([]*wrapperspb.StringValue, 2*perClient)
	errs := make([]error, 2*perClient)
	for i := range replies {
		replies[i] = new(wrapperspb.StringValue)
		wg.Go(func() {
			errs[i] = conns[i%2].Invoke(t.Context(), methodGet, wrapperspb.String("a"), replies[i])
		})
	}
	wg.Wait()
	for i := range replies {
		if errs[i] != nil || replies[i].GetValue() != "a#1" {
			t.Errorf("call %d: got %q, %v; want %q", i, replies[i].GetValue(), errs[i], "a#1")
		}
	}
	if got := b.calls.Load(); got != 1 {
		t.Errorf("got %d server calls, want 1", got)
	}
}

// TestClientCallOptions: options that report back after the call are
// answered by the interceptor, never by a load that may outlive the call.
func TestClientCallOptions(t *testing.T) {
	rdb := setup(t)
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-origin", "1"))
		return echo(ctx, m, req, n)
	}}
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	conn := serve(t, b, nil, grpc.WithChainUnaryInterceptor(guardgrpc.UnaryClientInterceptor(g, guardgrpc.WithMethods(methodGet))))
	for i, want := range []string{stored, hit} {
		var hdr, trailer metadata.MD
		var finished []error
		err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue),
			grpc.Header(&hdr), grpc.Trailer(&trailer), grpc.OnFinish(func(err error) { finished = append(finished, err) }))
		if err != nil {
			t.Fatal(err)
		}
		if got := hdr.Get(guardgrpc.HeaderCacheStatus); len(got) != 1 || got[0] != want || len(hdr) != 1 {
			t.Errorf("call %d: got header %v, want only cache-status %q", i, hdr, want)
		}
		if len(trailer) != 0 {
			t.Errorf("call %d: got trailer %v, want none", i, trailer)
		}
		if len(finished) != 1 || finished[0] != nil {
			t.Errorf("call %d: OnFinish got %v, want one nil", i, finished)
		}
	}
}
