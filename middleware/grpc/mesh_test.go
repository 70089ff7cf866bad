package guardgrpc_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// meshMetadata is what Envoy, Istio and OpenTelemetry's default
// propagators put on the i-th call of a client behind one proxy: ids new
// on every call, forwarding entries the same on all.
func meshMetadata(i int) []string {
	id := fmt.Sprintf("%032x", i+1)
	return []string{
		"x-request-id", "req-" + strconv.Itoa(i),
		"traceparent", "00-" + id + "-" + id[16:] + "-01",
		"tracestate", "vendor=" + strconv.Itoa(i),
		"baggage", "session=" + strconv.Itoa(i),
		"x-b3-traceid", id,
		"x-b3-spanid", id[16:],
		"x-b3-sampled", "1",
		"x-envoy-attempt-count", "1",
		"x-envoy-expected-rq-timeout-ms", strconv.Itoa(15000 - i),
		"x-forwarded-for", "10.0.0.1",
		"x-forwarded-proto", "https",
	}
}

// TestServerMeshCoalesces: twenty identical calls carrying the metadata a
// mesh adds run the handler once. The handler's first run waits until all
// twenty have reached the server, so calls that bypassed the cache would
// each run it.
func TestServerMeshCoalesces(t *testing.T) {
	rdb := setup(t)
	const n = 20
	var entered atomic.Int64
	all := make(chan struct{})
	arrive := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if entered.Add(1) == n {
			close(all)
		}
		return h(ctx, req)
	}
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, k int64) (proto.Message, error) {
		<-all
		return echo(ctx, m, req, k)
	}}
	var bypassed []string
	var mu sync.Mutex
	g := newGroup(t, rdb, namespace(t), guard.Hooks{})
	conn := serve(t, b, []grpc.UnaryServerInterceptor{arrive, guardgrpc.UnaryServerInterceptor(g,
		guardgrpc.WithMethods(methodGet),
		guardgrpc.WithBypassHook(func(_ context.Context, info guardgrpc.BypassInfo) {
			mu.Lock()
			defer mu.Unlock()
			bypassed = append(bypassed, string(info.Reason)+" "+info.Metadata)
		}))})
	statuses := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			reply := new(wrapperspb.StringValue)
			st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), reply, meshMetadata(i)...)
			if err != nil || reply.GetValue() != "a#1" {
				t.Errorf("call %d: got %q, %v; want %q", i, reply.GetValue(), err, "a#1")
			}
			statuses[i] = st
		})
	}
	wg.Wait()
	if got := b.calls.Load(); got != 1 {
		t.Errorf("got %d handler calls for %d identical calls, want 1", got, n)
	}
	if c := counts(statuses); c[stored] != 1 || c[stored]+c[shared]+c[hit] != n {
		t.Errorf("got cache-status counts %v, want one %q and the rest %q or %q", c, stored, shared, hit)
	}
	if len(bypassed) > 0 {
		t.Errorf("bypass hook called: %q", bypassed)
	}
}

func counts(xs []string) map[string]int {
	m := map[string]int{}
	for _, x := range xs {
		m[x]++
	}
	return m
}

// ignorable holds an example of each default-ignorable entry.
var ignorable = []string{
	"traceparent", "tracestate", "baggage", "grpc-trace-bin", "b3", "x-b3-traceid", "x-b3-spanid",
	"x-b3-parentspanid", "x-b3-sampled", "x-b3-flags", "x-request-id", "x-amzn-trace-id",
	"x-cloud-trace-context", "uber-trace-id", "uberctx-user", "jaeger-debug-id", "sentry-trace",
	"x-datadog-trace-id", "x-datadog-parent-id", "x-datadog-sampling-priority", "ot-tracer-traceid",
	"ot-tracer-spanid", "ot-baggage-k", "x-ot-span-context", "x-client-trace-id", "x-envoy-force-trace",
	"x-envoy-attempt-count", "x-envoy-is-timeout-retry", "x-envoy-expected-rq-timeout-ms",
	"x-envoy-upstream-stream-duration-ms", "x-envoy-upstream-rq-timeout-ms",
	"x-envoy-upstream-rq-per-try-timeout-ms", "x-envoy-retry-on", "x-envoy-retry-grpc-on",
	"x-envoy-max-retries", "x-envoy-hedge-on-per-try-timeout", "x-envoy-decorator-operation",
}

// keyedByDefault holds an example of each entry keyed by default.
var keyedByDefault = []string{
	"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
	"x-forwarded-prefix", "x-real-ip", "x-envoy-external-address", "x-envoy-original-path",
	"x-forwarded-client-cert", "x-envoy-peer-metadata", "x-envoy-peer-metadata-id", "x-envoy-internal",
}

// side serves b behind one of the interceptors, built with g and opts,
// and returns a connection to it.
type side struct {
	name string
	conn func(t *testing.T, g *guard.Group, b *backend, opts ...guardgrpc.Option) *grpc.ClientConn
}

var sides = []side{
	{"server", func(t *testing.T, g *guard.Group, b *backend, opts ...guardgrpc.Option) *grpc.ClientConn {
		return serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, opts...)})
	}},
	{"client", func(t *testing.T, g *guard.Group, b *backend, opts ...guardgrpc.Option) *grpc.ClientConn {
		return serve(t, b, nil, grpc.WithChainUnaryInterceptor(guardgrpc.UnaryClientInterceptor(g, opts...)))
	}},
}

// call makes a call of methodGet and returns the reply and cache-status:
// the server sends it, the client interceptor hands it to grpc.Header.
func call(t *testing.T, conn *grpc.ClientConn, req string, md ...string) (reply, st string) {
	t.Helper()
	r := new(wrapperspb.StringValue)
	st, err := invoke(t.Context(), conn, methodGet, wrapperspb.String(req), r, md...)
	if err != nil {
		t.Fatalf("call %q %q: %v", req, md, err)
	}
	return r.GetValue(), st
}

// TestDefaultIgnoredMetadata: calls differing only in a tracing,
// correlation or proxy-control entry share one answer.
func TestDefaultIgnoredMetadata(t *testing.T) {
	rdb := setup(t)
	for _, s := range sides {
		t.Run(s.name, func(t *testing.T) {
			b := &backend{fn: echo}
			conn := s.conn(t, newGroup(t, rdb, namespace(t), guard.Hooks{}), b, guardgrpc.WithMethods(methodGet))
			for _, k := range ignorable {
				v := "1"
				if k == "grpc-trace-bin" {
					continue // binary: the transport's own
				}
				first, _ := call(t, conn, k, k, v)
				second, st := call(t, conn, k, k, "2")
				third, _ := call(t, conn, k)
				if second != first || third != first || st != hit {
					t.Errorf("%s: got %q, %q (%q), %q; want one answer, a hit", k, first, second, st, third)
				}
			}
			if got, want := b.calls.Load(), int64(len(ignorable)-1); got != want {
				t.Errorf("got %d handler calls, want %d", got, want)
			}
		})
	}
}

// TestDefaultKeyedMetadata: forwarding and identity entries are keyed:
// calls carrying the same values share, other values (or none) get
// answers of their own; with WithUnkeyedForwarding the forwarding ones
// are ignored, the identity ones stay keyed.
func TestDefaultKeyedMetadata(t *testing.T) {
	rdb := setup(t)
	identity := []string{"x-forwarded-client-cert", "x-envoy-peer-metadata", "x-envoy-peer-metadata-id", "x-envoy-internal"}
	for _, s := range sides {
		for _, unkeyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unkeyed forwarding %v", s.name, unkeyed), func(t *testing.T) {
				opts := []guardgrpc.Option{guardgrpc.WithMethods(methodGet)}
				if unkeyed {
					opts = append(opts, guardgrpc.WithUnkeyedForwarding())
				}
				b := &backend{fn: echo}
				conn := s.conn(t, newGroup(t, rdb, namespace(t), guard.Hooks{}), b, opts...)
				var want int64
				for _, k := range keyedByDefault {
					keyed := !unkeyed || slices.Contains(identity, k)
					a1, st1 := call(t, conn, k, k, "1")
					a2, st2 := call(t, conn, k, k, "1")
					b1, st3 := call(t, conn, k, k, "2")
					c1, st4 := call(t, conn, k)
					switch {
					case st1 != stored || st2 != hit || a2 != a1:
						t.Errorf("%s: same value: got %q (%q), %q (%q); want one answer, stored then hit", k, a1, st1, a2, st2)
					case keyed && (b1 == a1 || c1 == a1 || c1 == b1 || st3 != stored || st4 != stored):
						t.Errorf("%s keyed: got %q, %q (%q), none %q (%q); want three answers", k, a1, b1, st3, c1, st4)
					case !keyed && (b1 != a1 || c1 != a1 || st3 != hit || st4 != hit):
						t.Errorf("%s unkeyed: got %q, %q (%q), none %q (%q); want one answer", k, a1, b1, st3, c1, st4)
					}
					if want++; keyed {
						want += 2
					}
				}
				if got := b.calls.Load(); got != want {
					t.Errorf("got %d handler calls, want %d", got, want)
				}
			})
		}
	}
}

// TestIgnoredBeatsKeyedByDefault: naming an entry keyed by default in
// WithIgnoredMetadata ignores it (a caller's certificate, for a method
// whose answer does not depend on the caller).
func TestIgnoredBeatsKeyedByDefault(t *testing.T) {
	rdb := setup(t)
	b := &backend{fn: echo}
	conn := sides[0].conn(t, newGroup(t, rdb, namespace(t), guard.Hooks{}), b,
		guardgrpc.WithMethods(methodGet), guardgrpc.WithIgnoredMetadata("x-forwarded-client-cert"))
	a, _ := call(t, conn, "a", "x-forwarded-client-cert", "By=spiffe://a;URI=spiffe://b")
	c, st := call(t, conn, "a", "x-forwarded-client-cert", "By=spiffe://a;URI=spiffe://c")
	if c != a || st != hit || b.calls.Load() != 1 {
		t.Errorf("got %q then %q (%q) after %d handler calls; want one answer, a hit", a, c, st, b.calls.Load())
	}
}

// TestBypassHook: every call of a listed method that goes past the cache
// is reported with the reason, and with the metadata key when one is the
// reason; the response header never names it.
func TestBypassHook(t *testing.T) {
	rdb := setup(t)
	type want struct {
		reason   guardgrpc.BypassReason
		metadata string
	}
	declining := func(_ context.Context, _ string, req proto.Message) (string, bool) {
		v := req.(*wrapperspb.StringValue).GetValue()
		return v, v != "private"
	}
	tests := []struct {
		name   string
		opts   []guardgrpc.Option
		method string
		md     []string
		copts  []grpc.CallOption
		req    string
		sides  []string // default both
		want   *want
	}{
		{name: "cached", want: nil},
		{name: "method not listed", method: methodOther, want: nil},
		{name: "mesh metadata", md: meshMetadata(3), want: nil},
		{name: "authorization", md: []string{"authorization", "Bearer x"}, want: &want{reason: guardgrpc.BypassAuthorization}},
		{name: "per-call credentials", copts: []grpc.CallOption{grpc.PerRPCCredentials(token("x"))}, sides: []string{"client"},
			want: &want{reason: guardgrpc.BypassAuthorization}},
		{name: "unkeyed metadata", md: []string{"x-tenant", "t1", "x-locale", "fr", "x-request-id", "1"},
			want: &want{reason: guardgrpc.BypassUnkeyedMetadata, metadata: "x-locale"}},
		{name: "unkeyed metadata, first by name", md: []string{"x-zone", "z", "x-locale", "fr"},
			want: &want{reason: guardgrpc.BypassUnkeyedMetadata, metadata: "x-locale"}},
		{name: "a client's own grpc- metadata", md: []string{"grpc-tenant", "a"},
			want: &want{reason: guardgrpc.BypassUnkeyedMetadata, metadata: "grpc-tenant"}},
		{name: "key func declines", opts: []guardgrpc.Option{guardgrpc.WithKeyFunc(declining)}, req: "private",
			want: &want{reason: guardgrpc.BypassKeyFunc}},
	}
	for _, tt := range tests {
		for _, s := range sides {
			if tt.sides != nil && !slices.Contains(tt.sides, s.name) {
				continue
			}
			t.Run(tt.name+"/"+s.name, func(t *testing.T) {
				var got []guardgrpc.BypassInfo
				var mu sync.Mutex
				hook := guardgrpc.WithBypassHook(func(_ context.Context, info guardgrpc.BypassInfo) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, info)
				})
				opts := append([]guardgrpc.Option{guardgrpc.WithMethods(methodGet), hook}, tt.opts...)
				if tt.opts == nil {
					opts = append(opts, guardgrpc.WithMetadata("x-tenant"))
				}
				b := &backend{fn: echo}
				conn := s.conn(t, newGroup(t, rdb, namespace(t), guard.Hooks{}), b, opts...)
				method := methodGet
				if tt.method != "" {
					method = tt.method
				}
				ctx := t.Context()
				if len(tt.md) > 0 {
					ctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
				}
				var hdr metadata.MD
				err := conn.Invoke(ctx, method, wrapperspb.String(tt.req), new(wrapperspb.StringValue), append(tt.copts, grpc.Header(&hdr))...)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case tt.want == nil && len(got) != 0:
					t.Errorf("got bypasses %+v, want none", got)
				case tt.want != nil && (len(got) != 1 || got[0].Reason != tt.want.reason || got[0].Metadata != tt.want.metadata || got[0].FullMethod != method):
					t.Errorf("got bypasses %+v, want one of %s with reason %q, metadata %q", got, method, tt.want.reason, tt.want.metadata)
				}
				for _, v := range hdr.Get(guardgrpc.HeaderCacheStatus) {
					if tt.want != nil && tt.want.metadata != "" && strings.Contains(v, tt.want.metadata) {
						t.Errorf("cache-status %q names the metadata key", v)
					}
				}
				if b.calls.Load() != 1 {
					t.Errorf("got %d handler calls, want 1", b.calls.Load())
				}
			})
		}
	}
}

// TestBypassHookReasons: the reasons the interceptor finds past the key.
// The server interceptor is called directly where grpc would not let a
// call through (a request or answer that is not a proto message).
func TestBypassHookReasons(t *testing.T) {
	rdb := setup(t)
	record := func() (guardgrpc.Option, func() []guardgrpc.BypassInfo) {
		var mu sync.Mutex
		var got []guardgrpc.BypassInfo
		return guardgrpc.WithBypassHook(func(_ context.Context, info guardgrpc.BypassInfo) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, info)
			}), func() []guardgrpc.BypassInfo {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(got)
			}
	}
	check := func(t *testing.T, got []guardgrpc.BypassInfo, want guardgrpc.BypassReason) {
		t.Helper()
		if len(got) != 1 || got[0].Reason != want || got[0].FullMethod != methodGet {
			t.Errorf("got bypasses %+v, want one of %s with reason %q", got, methodGet, want)
		}
	}
	info := &grpc.UnaryServerInfo{FullMethod: methodGet}

	t.Run("request not proto", func(t *testing.T) {
		hook, got := record()
		icpt := guardgrpc.UnaryServerInterceptor(newGroup(t, rdb, namespace(t), guard.Hooks{}), guardgrpc.WithMethods(methodGet), hook)
		var calls int
		resp, err := icpt(t.Context(), "not proto", info, func(context.Context, any) (any, error) { calls++; return "ok", nil })
		if resp != "ok" || err != nil || calls != 1 {
			t.Errorf("got %v, %v after %d handler calls; want ok after 1", resp, err, calls)
		}
		check(t, got(), guardgrpc.BypassNotProto)
	})
	t.Run("answer not proto", func(t *testing.T) {
		hook, got := record()
		icpt := guardgrpc.UnaryServerInterceptor(newGroup(t, rdb, namespace(t), guard.Hooks{}), guardgrpc.WithMethods(methodGet), hook)
		var calls int
		resp, err := icpt(t.Context(), wrapperspb.String("a"), info, func(context.Context, any) (any, error) { calls++; return "ok", nil })
		if resp != "ok" || err != nil || calls != 1 {
			t.Errorf("got %v, %v after %d handler calls; want ok after 1", resp, err, calls)
		}
		check(t, got(), guardgrpc.BypassUnstorable)
	})
	t.Run("group closed", func(t *testing.T) {
		for _, s := range sides {
			t.Run(s.name, func(t *testing.T) {
				hook, got := record()
				g := newGroup(t, rdb, namespace(t), guard.Hooks{})
				b := &backend{fn: echo}
				conn := s.conn(t, g, b, guardgrpc.WithMethods(methodGet), hook)
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
				if r, _ := call(t, conn, "a"); r != "a#1" {
					t.Errorf("got %q, want %q", r, "a#1")
				}
				check(t, got(), guardgrpc.BypassClosed)
			})
		}
	})
	t.Run("undecodable entry", func(t *testing.T) {
		// Another build's handler answered the method with a Duration;
		// this one answers StringValue and refuses the entry.
		hook, got := record()
		ns := namespace(t)
		other := guardgrpc.UnaryServerInterceptor(newGroup(t, rdb, ns, guard.Hooks{}), guardgrpc.WithMethods(methodGet))
		// (Called as a server under fleetAuthority is: :authority is keyed.)
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(":authority", fleetAuthority))
		if _, err := other(ctx, wrapperspb.String("a"), info, func(context.Context, any) (any, error) {
			return durationpb.New(time.Second), nil
		}); err != nil {
			t.Fatal(err)
		}
		b := &backend{fn: echo}
		conn := sides[0].conn(t, newGroup(t, rdb, ns, guard.Hooks{}), b, guardgrpc.WithMethods(methodGet), hook)
		if _, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("b"), new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err) // this build's handler answers StringValue
		}
		if r, st := call(t, conn, "a"); r != "a#2" || st != bypass {
			t.Errorf("got %q (%q), want %q (%q)", r, st, "a#2", bypass)
		}
		check(t, got(), guardgrpc.BypassUndecodable)
	})
	// Garbage under a key (not an answer, or an answer of its own type that
	// does not unmarshal: a truncated write, a stray SET) is dropped by the
	// calls that find it, which share one run to refill it: 1 handler run
	// for 16 calls, none bypassed. Before, each call ran its own handler
	// until the entry expired.
	for _, garbage := range []struct {
		name string
		v    []byte
	}{
		{"not an answer", []byte("\xffjunk")},
		{"truncated answer", append([]byte{1, byte(len("google.protobuf.StringValue"))},
			append([]byte("google.protobuf.StringValue"), 0x0a, 0x05, 'a')...)},
	} {
		for _, s := range sides {
			t.Run("garbage entry refilled once/"+garbage.name+"/"+s.name, func(t *testing.T) {
				hook, got := record()
				ns := namespace(t)
				var key atomic.Pointer[string]
				g := newGroup(t, rdb, ns, guard.Hooks{Miss: func(k string) { key.CompareAndSwap(nil, &k) }})
				b := &backend{fn: echo}
				conn := s.conn(t, g, b, guardgrpc.WithMethods(methodGet), hook)
				if r, _ := call(t, conn, "a"); r != "a#1" {
					t.Fatalf("first call: %q, want a#1", r)
				}
				// Another node writes garbage under the key.
				other := newGroup(t, rdb, ns, guard.Hooks{})
				k := *key.Load()
				if err := other.Invalidate(t.Context(), k); err != nil {
					t.Fatal(err)
				}
				if _, err := other.Get(t.Context(), k, func(context.Context) ([]byte, error) { return garbage.v, nil }); err != nil {
					t.Fatal(err)
				}
				const n = 16
				replies := make([]string, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						r := new(wrapperspb.StringValue)
						if _, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), r); err != nil {
							t.Errorf("call %d: %v", i, err)
						}
						replies[i] = r.GetValue()
					})
				}
				wg.Wait()
				if runs := b.calls.Load(); runs != 2 {
					t.Errorf("%d handler runs, want 2 (the first call, one refill)", runs)
				}
				for i, r := range replies {
					if r != "a#2" {
						t.Errorf("call %d: %q, want the refill's a#2", i, r)
					}
				}
				if bp := got(); len(bp) != 0 {
					t.Errorf("bypasses %+v, want none", bp)
				}
			})
		}
	}
}
