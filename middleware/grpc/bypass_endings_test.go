package guardgrpc_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// bypassPath is a way for a call of a listed method to go past the cache,
// with the interceptor and the call that take it.
type bypassPath struct {
	name string
	opts []guardgrpc.Option
	md   []string // the call's incoming metadata
	req  any
}

// bypassPaths are the ways a client, or the configuration, sends a call of
// a listed method past the cache.
func bypassPaths() []bypassPath {
	get := wrapperspb.String("a")
	keyFunc := func(key string, ok bool) guardgrpc.Option {
		return guardgrpc.WithKeyFunc(func(context.Context, string, proto.Message) (string, bool) { return key, ok })
	}
	return []bypassPath{
		{name: "authorization", md: []string{"authorization", "Bearer x"}, req: get},
		{name: "unkeyed metadata", md: []string{"x-anything", "x"}, req: get},
		{name: "key func declines", opts: []guardgrpc.Option{keyFunc("k", false)}, req: get},
		{name: "key func empty key", opts: []guardgrpc.Option{keyFunc("", true)}, req: get},
		{name: "key func huge key", opts: []guardgrpc.Option{keyFunc(strings.Repeat("k", guard.MaxKeyBytes+1), true)}, req: get},
		{name: "not proto", req: "a"},
		{name: "closed group", req: get},
	}
}

// TestBypassedCallEndings: a call that goes past the cache runs its
// handler as a cached call does: a panic or a runtime.Goexit of the
// handler answers that call Internal, and the server's goroutine goes on.
// Before, every bypass path called the handler bare, so that one metadata
// entry any client may send turned a handler's panic, which a cached call
// survives, into the server's crash (and a Goexit into a call left
// unanswered until its deadline).
func TestBypassedCallEndings(t *testing.T) {
	rdb := setup(t)
	endings := map[string]func(){
		"panic":  func() { panic("handler bug") },
		"goexit": runtime.Goexit,
	}
	for _, p := range bypassPaths() {
		for ending, end := range endings {
			t.Run(p.name+"/"+ending, func(t *testing.T) {
				g, err := guard.New(rdb, guard.Options{Namespace: namespace(t), RedisTimeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				if p.name == "closed group" {
					_ = g.Close()
				}
				icpt := guardgrpc.UnaryServerInterceptor(g, append([]guardgrpc.Option{guardgrpc.WithMethods(methodGet)}, p.opts...)...)
				var runs atomic.Int64
				handler := func(context.Context, any) (any, error) {
					runs.Add(1)
					end()
					return wrapperspb.String("never"), nil
				}
				ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(p.md...))
				escaped, err := callInterceptor(ctx, icpt, p.req, handler)
				if escaped != "" {
					t.Fatalf("the handler's %s reached the server's goroutine", escaped)
				}
				if status.Code(err) != codes.Internal || runs.Load() != 1 {
					t.Errorf("got %v after %d handler runs, want Internal after 1", err, runs.Load())
				}
			})
		}
	}
}

// callInterceptor calls icpt for methodGet on a goroutine of its own, as
// grpc-go would, and returns what escaped it ("panic", or "goexit" when the
// goroutine ended without returning), or its error.
func callInterceptor(ctx context.Context, icpt grpc.UnaryServerInterceptor, req any, h grpc.UnaryHandler) (escaped string, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		returned := false
		defer func() {
			switch {
			case recover() != nil:
				escaped = "panic"
			case !returned:
				escaped = "goexit"
			}
		}()
		_, err = icpt(ctx, req, &grpc.UnaryServerInfo{FullMethod: methodGet}, h)
		returned = true
	}()
	<-done
	return escaped, err
}

// TestKeyFuncRefusedKeyBypasses: a server KeyFunc key the guard cannot
// take (empty, or past guard.MaxKeyBytes: a client may choose the field a
// KeyFunc reads) sends the call past the cache, reported to the bypass
// hook, rather than failing it: before, such a call got Unavailable and
// its handler never ran.
func TestKeyFuncRefusedKeyBypasses(t *testing.T) {
	rdb := setup(t)
	for _, key := range []string{"", strings.Repeat("k", guard.MaxKeyBytes+1)} {
		g := newGroup(t, rdb, namespace(t), guard.Hooks{})
		var reasons []guardgrpc.BypassReason
		b := &backend{fn: echo}
		conn := serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g,
			guardgrpc.WithMethods(methodGet),
			guardgrpc.WithKeyFunc(func(context.Context, string, proto.Message) (string, bool) { return key, true }),
			guardgrpc.WithBypassHook(func(_ context.Context, info guardgrpc.BypassInfo) { reasons = append(reasons, info.Reason) }),
		)})
		reply := new(wrapperspb.StringValue)
		st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), reply)
		if err != nil || reply.GetValue() != "a#1" || b.calls.Load() != 1 {
			t.Fatalf("key of %d bytes: %v, reply %q after %d handler runs; want the handler's answer", len(key), err, reply.GetValue(), b.calls.Load())
		}
		if st != "stampede; fwd=bypass" || len(reasons) != 1 || reasons[0] != guardgrpc.BypassKeyFunc {
			t.Errorf("key of %d bytes: cache-status %q, bypass reasons %v; want a key-func bypass", len(key), st, reasons)
		}
	}
}
