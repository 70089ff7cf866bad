package guardgrpc_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

const (
	hit      = "stampede; hit"
	miss     = "stampede; fwd=miss"
	stored   = "stampede; fwd=miss; stored"
	bypass   = "stampede; fwd=bypass"
	unkeyed  = "stampede; fwd=bypass; detail=unkeyed-metadata"
	shared   = "stampede; fwd=miss; collapsed"
	noHeader = ""
)

// echo answers "<request>#<handler run>", so a cached answer shows the run
// that produced it.
func echo(_ context.Context, _ string, req proto.Message, n int64) (proto.Message, error) {
	return wrapperspb.String(fmt.Sprintf("%s#%d", req.(*wrapperspb.StringValue).GetValue(), n)), nil
}

func TestServerInterceptor(t *testing.T) {
	rdb := setup(t)

	type call struct {
		method     string // default: the test's
		req        string
		md         []string // key, value, ...
		wantCode   codes.Code
		wantReply  string // with codes.OK
		wantMsg    string // with an error code
		wantStatus string // cache-status header
	}
	failing := func(c codes.Code) func(context.Context, string, proto.Message, int64) (proto.Message, error) {
		return func(_ context.Context, _ string, req proto.Message, n int64) (proto.Message, error) {
			return nil, status.Errorf(c, "%s failed #%d", req.(*wrapperspb.StringValue).GetValue(), n)
		}
	}
	tests := []struct {
		name        string
		opts        []guardgrpc.Option
		method      string // default methodGet
		handler     func(context.Context, string, proto.Message, int64) (proto.Message, error)
		calls       []call
		wantHandler int64
	}{
		{
			name: "ok answer cached",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: stored},
				{req: "a", wantReply: "a#1", wantStatus: hit},
				{req: "a", wantReply: "a#1", wantStatus: hit},
			},
			wantHandler: 1,
		},
		{
			name:   "method not listed",
			opts:   []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			method: methodOther,
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: noHeader},
				{req: "a", wantReply: "a#2", wantStatus: noHeader},
			},
			wantHandler: 2,
		},
		{
			name: "no method listed caches nothing",
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: noHeader},
				{req: "a", wantReply: "a#2", wantStatus: noHeader},
			},
			wantHandler: 2,
		},
		{
			name:    "errors not cached",
			opts:    []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithNegativeNotFound()},
			handler: failing(codes.Unavailable),
			calls: []call{
				{req: "a", wantCode: codes.Unavailable, wantMsg: "a failed #1", wantStatus: miss},
				{req: "a", wantCode: codes.Unavailable, wantMsg: "a failed #2", wantStatus: miss},
				{req: "a", wantCode: codes.Unavailable, wantMsg: "a failed #3", wantStatus: miss},
			},
			wantHandler: 3,
		},
		{
			name:    "not found not cached by default",
			opts:    []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			handler: failing(codes.NotFound),
			calls: []call{
				{req: "a", wantCode: codes.NotFound, wantMsg: "a failed #1", wantStatus: miss},
				{req: "a", wantCode: codes.NotFound, wantMsg: "a failed #2", wantStatus: miss},
			},
			wantHandler: 2,
		},
		{
			name:    "not found negative-cached with option",
			opts:    []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithNegativeNotFound()},
			handler: failing(codes.NotFound),
			calls: []call{
				{req: "a", wantCode: codes.NotFound, wantMsg: "a failed #1", wantStatus: miss},
				{req: "a", wantCode: codes.NotFound, wantMsg: "guardgrpc: not found (cached)", wantStatus: hit},
				{req: "a", wantCode: codes.NotFound, wantMsg: "guardgrpc: not found (cached)", wantStatus: hit},
				{req: "b", wantCode: codes.NotFound, wantMsg: "b failed #2", wantStatus: miss},
			},
			wantHandler: 2,
		},
		{
			name: "different requests, different keys",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: stored},
				{req: "b", wantReply: "b#2", wantStatus: stored},
				{req: "", wantReply: "#3", wantStatus: stored},
				{req: "a", wantReply: "a#1", wantStatus: hit},
				{req: "b", wantReply: "b#2", wantStatus: hit},
				{req: "", wantReply: "#3", wantStatus: hit},
			},
			wantHandler: 3,
		},
		{
			name: "same request, other method, other key",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet, methodOther)},
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: stored},
				{method: methodOther, req: "a", wantReply: "a#2", wantStatus: stored},
				{req: "a", wantReply: "a#1", wantStatus: hit},
				{method: methodOther, req: "a", wantReply: "a#2", wantStatus: hit},
			},
			wantHandler: 2,
		},
		{
			name: "listed metadata splits keys",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithMetadata("X-Tenant")},
			calls: []call{
				{req: "a", md: []string{"x-tenant", "t1"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t2"}, wantReply: "a#2", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t1"}, wantReply: "a#1", wantStatus: hit},
				{req: "a", wantReply: "a#3", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", ""}, wantReply: "a#4", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t1", "x-tenant", "t2"}, wantReply: "a#5", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t2", "x-tenant", "t1"}, wantReply: "a#6", wantStatus: stored},
				{req: "a", md: []string{"x-tenant", "t2"}, wantReply: "a#2", wantStatus: hit},
			},
			wantHandler: 6,
		},
		{
			// A handler may read any metadata entry (a tenant, a locale):
			// one the key does not hold keeps the call from the cache,
			// so no caller is served an answer made for another's.
			name: "metadata not listed bypasses",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithMetadata("x-tenant")},
			calls: []call{
				{req: "a", md: []string{"x-locale", "fr"}, wantReply: "a#1", wantStatus: unkeyed},
				{req: "a", wantReply: "a#2", wantStatus: stored},
				{req: "a", md: []string{"x-locale", "fr"}, wantReply: "a#3", wantStatus: unkeyed},
				{req: "a", md: []string{"X-Locale", "de", "x-tenant", "t1"}, wantReply: "a#4", wantStatus: unkeyed},
				{req: "a", wantReply: "a#2", wantStatus: hit},
			},
			wantHandler: 4,
		},
		{
			name: "metadata declared ignorable shares",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithIgnoredMetadata("X-Request-Id", "x-b3-*")},
			calls: []call{
				{req: "a", md: []string{"x-request-id", "1", "x-b3-traceid", "9"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"x-request-id", "2", "x-b3-spanid", "8"}, wantReply: "a#1", wantStatus: hit},
				{req: "a", wantReply: "a#1", wantStatus: hit},
				{req: "a", md: []string{"x-b3", "1"}, wantReply: "a#2", wantStatus: unkeyed},
			},
			wantHandler: 2,
		},
		{
			name: "all unlisted metadata ignorable with *",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithIgnoredMetadata("*")},
			calls: []call{
				{req: "a", md: []string{"x-locale", "fr"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"x-locale", "de"}, wantReply: "a#1", wantStatus: hit},
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#2", wantStatus: bypass},
			},
			wantHandler: 2,
		},
		{
			// Every call here carries :authority, content-type, user-agent
			// and grpc-accept-encoding; tracing adds these.
			name: "transport and trace metadata ignorable by default",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			calls: []call{
				{req: "a", md: []string{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "grpc-trace-bin", "x"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"traceparent", "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01", "tracestate", "k=v"}, wantReply: "a#1", wantStatus: hit},
			},
			wantHandler: 1,
		},
		{
			name: "authorization allowed is ignorable",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithAllowAuthorization()},
			calls: []call{
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"authorization", "Bearer y"}, wantReply: "a#1", wantStatus: hit},
			},
			wantHandler: 1,
		},
		{
			name: "authorization bypasses",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			calls: []call{
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#1", wantStatus: bypass},
				{req: "a", md: []string{"Authorization", "Bearer x"}, wantReply: "a#2", wantStatus: bypass},
				{req: "a", wantReply: "a#3", wantStatus: stored},
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#4", wantStatus: bypass},
			},
			wantHandler: 4,
		},
		{
			name: "authorization allowed and keyed",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithAllowAuthorization(), guardgrpc.WithMetadata("authorization")},
			calls: []call{
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#1", wantStatus: stored},
				{req: "a", md: []string{"authorization", "Bearer x"}, wantReply: "a#1", wantStatus: hit},
				{req: "a", md: []string{"authorization", "Bearer y"}, wantReply: "a#2", wantStatus: stored},
			},
			wantHandler: 2,
		},
		{
			name: "panic is Internal, not cached, server survives",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet)},
			handler: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
				if req.(*wrapperspb.StringValue).GetValue() == "boom" {
					panic(errors.New("handler bug"))
				}
				return echo(ctx, m, req, n)
			},
			calls: []call{
				{req: "boom", wantCode: codes.Internal, wantMsg: "guardgrpc: handler panicked", wantStatus: miss},
				{req: "boom", wantCode: codes.Internal, wantMsg: "guardgrpc: handler panicked", wantStatus: miss},
				{req: "a", wantReply: "a#3", wantStatus: stored},
				{req: "a", wantReply: "a#3", wantStatus: hit},
			},
			wantHandler: 3,
		},
		{
			name: "key func",
			opts: []guardgrpc.Option{guardgrpc.WithMethods(methodGet), guardgrpc.WithKeyFunc(
				func(_ context.Context, method string, req proto.Message) (string, bool) {
					v := req.(*wrapperspb.StringValue).GetValue()
					return method, v != "private" // one answer for all, but "private"
				})},
			calls: []call{
				{req: "a", wantReply: "a#1", wantStatus: stored},
				{req: "b", wantReply: "a#1", wantStatus: hit},
				{req: "private", wantReply: "private#2", wantStatus: bypass},
				{req: "private", wantReply: "private#3", wantStatus: bypass},
			},
			wantHandler: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &backend{fn: echo}
			if tt.handler != nil {
				b.fn = tt.handler
			}
			g := newGroup(t, rdb, namespace(t), guard.Hooks{})
			conn := serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, tt.opts...)})
			for i, c := range tt.calls {
				method := cmp.Or(c.method, tt.method, methodGet)
				reply := new(wrapperspb.StringValue)
				st, err := invoke(t.Context(), conn, method, wrapperspb.String(c.req), reply, c.md...)
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
				if st != c.wantStatus {
					t.Errorf("call %d: got cache-status %q, want %q", i, st, c.wantStatus)
				}
			}
			if got := b.calls.Load(); got != tt.wantHandler {
				t.Errorf("got %d handler calls, want %d", got, tt.wantHandler)
			}
		})
	}
}

// rawCodec sends requests as given bytes, to put fields on the wire in any
// order; the server decodes them with its own proto codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

var _ encoding.Codec = rawCodec{}

func TestServerKeyIgnoresFieldOrder(t *testing.T) {
	rdb := setup(t)
	b := &backend{fn: func(_ context.Context, _ string, _ proto.Message, n int64) (proto.Message, error) {
		return wrapperspb.String(fmt.Sprintf("#%d", n)), nil
	}}
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	conn := serve(t, b, []grpc.UnaryServerInterceptor{
		guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodStruct, methodDuration)),
	})

	t.Run("wire order", func(t *testing.T) {
		seconds := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
		nanos := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 7)
		other := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 8)
		before := b.calls.Load()
		for i, wire := range [][]byte{
			append(append([]byte{}, seconds...), nanos...),
			append(append([]byte{}, nanos...), seconds...),
			append(append(append([]byte{}, nanos...), seconds...), nanos...), // last one wins
			append(append([]byte{}, other...), seconds...),
		} {
			reply := new(wrapperspb.StringValue)
			err := conn.Invoke(t.Context(), methodDuration, wire, reply, grpc.ForceCodec(rawCodec{}))
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if got := b.calls.Load() - before; got != 2 {
			t.Errorf("got %d handler calls for 2 distinct requests, want 2", got)
		}
	})

	t.Run("map order", func(t *testing.T) {
		fields := map[string]any{}
		for i := range 32 {
			fields[fmt.Sprintf("field%02d", i)] = i
		}
		before := b.calls.Load()
		for i := range 8 {
			// A fresh message each time: the client's (non-deterministic)
			// marshal puts the map entries in a random order.
			req, err := structpb.NewStruct(fields)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := invoke(t.Context(), conn, methodStruct, req, new(wrapperspb.StringValue)); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if got := b.calls.Load() - before; got != 1 {
			t.Errorf("got %d handler calls, want 1", got)
		}
	})
}

// TestServerCoalescing runs concurrent calls of one key on two servers,
// each with its own Group over one real Redis: the fleet runs one handler
// call, and every caller gets its answer.
func TestServerCoalescing(t *testing.T) {
	rdb := setup(t)
	const perServer = 8
	hooks, allMissed := countMisses(2 * perServer)
	ns := namespace(t)
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
		<-allMissed // every caller has looked and is waiting
		return echo(ctx, m, req, n)
	}}
	var conns []*grpc.ClientConn
	for range 2 {
		g := newGroup(t, rdb, ns, hooks)
		conns = append(conns, serve(t, b, []grpc.UnaryServerInterceptor{
			guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet)),
		}))
	}

	type outcome struct {
		reply, status string
		err           error
	}
	out := make(chan outcome, 2*perServer)
	var wg sync.WaitGroup
	for i := range 2 * perServer {
		wg.Go(func() {
			reply := new(wrapperspb.StringValue)
			st, err := invoke(t.Context(), conns[i%2], methodGet, wrapperspb.String("a"), reply)
			out <- outcome{reply.GetValue(), st, err}
		})
	}
	wg.Wait()
	close(out)
	statuses := map[string]int{}
	for o := range out {
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.reply != "a#1" {
			t.Errorf("got reply %q, want %q", o.reply, "a#1")
		}
		statuses[o.status]++
	}
	if got := b.calls.Load(); got != 1 {
		t.Errorf("got %d handler calls, want 1", got)
	}
	if statuses[stored] != 1 || statuses[stored]+statuses[shared]+statuses[hit] != 2*perServer {
		t.Errorf("got cache-status counts %v, want one %q and the rest %q or %q", statuses, stored, shared, hit)
	}

	// A node whose handler never ran decodes the stored answer by its
	// type name (protoregistry), with no method descriptor to go by.
	g := newGroup(t, rdb, ns, guard.Hooks{})
	idle := &backend{fn: echo}
	conn := serve(t, idle, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet))})
	reply := new(wrapperspb.StringValue)
	st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), reply)
	if err != nil || reply.GetValue() != "a#1" || st != hit || idle.calls.Load() != 0 {
		t.Errorf("third node: got %q, %q, %v, %d handler calls; want %q, %q, no error, none",
			reply.GetValue(), st, err, idle.calls.Load(), "a#1", hit)
	}
}

// TestServerHandlerDetached cancels the call that started the handler: the
// handler's context stays alive, it completes, and its answer is cached.
func TestServerHandlerDetached(t *testing.T) {
	rdb := setup(t)
	entered, release := make(chan struct{}), make(chan struct{})
	handlerCtxErr := make(chan error, 1)
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
		close(entered)
		<-release
		handlerCtxErr <- ctx.Err()
		return echo(ctx, m, req, n)
	}}
	serverCtx := make(chan context.Context, 1)
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		select {
		case serverCtx <- ctx:
		default:
		}
		return h(ctx, req)
	}
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	conn := serve(t, b, []grpc.UnaryServerInterceptor{record, guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet))})

	ctx, cancel := context.WithCancel(t.Context())
	leader := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, conn, methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue))
		leader <- err
	}()
	srvCtx := <-serverCtx
	<-entered
	cancel()
	if err := <-leader; status.Code(err) != codes.Canceled {
		t.Fatalf("leader: got %v, want Canceled", err)
	}
	<-srvCtx.Done() // the server saw the cancellation too
	close(release)
	if err := <-handlerCtxErr; err != nil {
		t.Errorf("handler context: got %v, want alive", err)
	}

	reply := new(wrapperspb.StringValue)
	if _, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), reply); err != nil {
		t.Fatal(err)
	}
	if reply.GetValue() != "a#1" || b.calls.Load() != 1 {
		t.Errorf("got %q after %d handler calls, want %q after 1", reply.GetValue(), b.calls.Load(), "a#1")
	}
}

// TestServerClosedGroup: a closed Group (shutdown under way) sends calls
// straight to the handler.
func TestServerClosedGroup(t *testing.T) {
	rdb := setup(t)
	b := &backend{fn: echo}
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	conn := serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet))})
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		reply := new(wrapperspb.StringValue)
		st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), reply)
		if want := fmt.Sprintf("a#%d", i+1); err != nil || reply.GetValue() != want || st != bypass {
			t.Errorf("call %d: got %q, %q, %v; want %q, %q", i, reply.GetValue(), st, err, want, bypass)
		}
	}
}
