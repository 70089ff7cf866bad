package guardgrpc_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stampede-go/stampede/guard"
	guardgrpc "github.com/stampede-go/stampede/middleware/grpc"
)

// TestFailureNotShared: n identical calls share one flight (the first
// handler run waits until every caller has joined it). A failure of a
// run answers the call that ran it alone: every other caller takes a turn
// of its own, whose success is shared with those still waiting. A
// NotFound negative-cached with WithNegativeNotFound is the exception:
// it is shared, as it is stored.
func TestFailureNotShared(t *testing.T) {
	rdb := setup(t)
	const n = 8
	tests := []struct {
		name  string
		opts  []guardgrpc.Option
		sides []string // default both
		// run answers the k-th handler run.
		run         func(k int64) (proto.Message, error)
		wantHandler int64
		// want returns, sorted, what the n callers must get: code and
		// message or reply.
		want []string
	}{
		{
			name: "error, then success",
			run: func(k int64) (proto.Message, error) {
				if k == 1 {
					return nil, status.Errorf(codes.PermissionDenied, "run %d: denied", k)
				}
				return wrapperspb.String(fmt.Sprintf("run %d", k)), nil
			},
			wantHandler: 2,
			want:        append([]string{"PermissionDenied run 1: denied"}, repeat("OK run 2", n-1)...),
		},
		{
			name:  "panic, then success",
			sides: []string{"server"}, // a bare server would not survive it
			run: func(k int64) (proto.Message, error) {
				if k == 1 {
					panic("bad input")
				}
				return wrapperspb.String(fmt.Sprintf("run %d", k)), nil
			},
			wantHandler: 2,
			want:        append([]string{"Internal guardgrpc: handler panicked"}, repeat("OK run 2", n-1)...),
		},
		{
			// A helper giving up as t.FailNow does: it ends the run's
			// goroutine, not the load, so it is that call's own failure,
			// as a panic is (before, all n got guard.ErrGoexit, and the
			// key backed off).
			name:  "goexit, then success",
			sides: []string{"server"}, // a bare server never answers it
			run: func(k int64) (proto.Message, error) {
				if k == 1 {
					runtime.Goexit()
				}
				return wrapperspb.String(fmt.Sprintf("run %d", k)), nil
			},
			wantHandler: 2,
			want:        append([]string{"Internal guardgrpc: handler called runtime.Goexit"}, repeat("OK run 2", n-1)...),
		},
		{
			name: "every run fails",
			run: func(k int64) (proto.Message, error) {
				return nil, status.Errorf(codes.Unavailable, "run %d: down", k)
			},
			wantHandler: n,
			want: func() []string {
				var w []string
				for k := 1; k <= n; k++ {
					w = append(w, fmt.Sprintf("Unavailable run %d: down", k))
				}
				return w
			}(),
		},
		{
			name: "not found, not negative-cached",
			run: func(k int64) (proto.Message, error) {
				if k == 1 {
					return nil, status.Errorf(codes.NotFound, "run %d: none", k)
				}
				return wrapperspb.String(fmt.Sprintf("run %d", k)), nil
			},
			wantHandler: 2,
			want:        append([]string{"NotFound run 1: none"}, repeat("OK run 2", n-1)...),
		},
		{
			name: "not found, negative-cached: shared",
			opts: []guardgrpc.Option{guardgrpc.WithNegativeNotFound()},
			run: func(k int64) (proto.Message, error) {
				return nil, status.Errorf(codes.NotFound, "run %d: none", k)
			},
			wantHandler: 1,
			want:        append([]string{"NotFound run 1: none"}, repeat("NotFound guardgrpc: not found (cached)", n-1)...),
		},
	}
	for _, tt := range tests {
		for _, s := range sides {
			if tt.sides != nil && !slices.Contains(tt.sides, s.name) {
				continue
			}
			t.Run(tt.name+"/"+s.name, func(t *testing.T) {
				hooks, allJoined := countMisses(n)
				b := &backend{fn: func(_ context.Context, _ string, _ proto.Message, k int64) (proto.Message, error) {
					if k == 1 {
						<-allJoined
					}
					return tt.run(k)
				}}
				g := newGroup(t, rdb, namespace(t), hooks)
				conn := s.conn(t, g, b, append([]guardgrpc.Option{guardgrpc.WithMethods(methodGet)}, tt.opts...)...)
				got := make([]string, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() {
						reply := new(wrapperspb.StringValue)
						err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("a"), reply)
						if st := status.Convert(err); err != nil {
							got[i] = st.Code().String() + " " + st.Message()
						} else {
							got[i] = "OK " + reply.GetValue()
						}
					})
				}
				wg.Wait()
				if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(tt.want)) {
					t.Errorf("got answers\n%q\nwant\n%q", sorted(got), sorted(tt.want))
				}
				if got := b.calls.Load(); got != tt.wantHandler {
					t.Errorf("got %d handler calls, want %d", got, tt.wantHandler)
				}
			})
		}
	}
}

func repeat(s string, n int) []string {
	r := make([]string, n)
	for i := range r {
		r[i] = s
	}
	return r
}

func sorted(xs []string) []string {
	ys := append([]string(nil), xs...)
	slices.Sort(ys)
	return ys
}

// TestFailureFollowerLeaves: callers that leave while another caller's
// run fails get their own cancellation, not its error, and take no turn.
func TestFailureFollowerLeaves(t *testing.T) {
	rdb := setup(t)
	const n = 4
	hooks, allJoined := countMisses(n)
	entered, release := make(chan struct{}), make(chan struct{})
	b := &backend{fn: func(_ context.Context, _ string, _ proto.Message, k int64) (proto.Message, error) {
		if k == 1 {
			close(entered)
		}
		<-release
		return nil, status.Errorf(codes.PermissionDenied, "run %d: denied", k)
	}}
	// A follower has left once the server's side of its call returned: the
	// client's side returns at its cancel, before the server has seen it.
	exited := make(chan struct{}, n)
	exits := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer func() { exited <- struct{}{} }()
		return h(ctx, req)
	}
	g := newGroup(t, rdb, namespace(t), hooks)
	conn := serve(t, b, []grpc.UnaryServerInterceptor{exits, guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet))})
	answer := func(err error) string { return status.Code(err).String() + " " + status.Convert(err).Message() }

	leader := make(chan string, 1)
	go func() {
		_, err := invoke(t.Context(), conn, methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue))
		leader <- answer(err)
	}()
	<-entered // the leader's call runs the handler
	ctx, cancel := context.WithCancel(t.Context())
	followers := make(chan string, n-1)
	for range n - 1 {
		go func() {
			_, err := invoke(ctx, conn, methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue))
			followers <- status.Code(err).String()
		}()
	}
	<-allJoined
	cancel()
	for range n - 1 {
		if got := <-followers; got != "Canceled" {
			t.Errorf("follower: got %s, want Canceled", got)
		}
	}
	for range n - 1 {
		<-exited // the leader's call cannot end before release
	}
	close(release) // the run fails once every follower has left
	if got, want := <-leader, "PermissionDenied run 1: denied"; got != want {
		t.Errorf("leader: got %q, want %q", got, want)
	}
	if got := b.calls.Load(); got != 1 {
		t.Errorf("got %d handler calls, want 1", got)
	}
}

// TestSlowRunOneAtATime: a handler slower than the guard's WaitTimeout
// (failing after it, as one whose backend hangs) runs once at a time
// across two servers: a call that waited WaitTimeout for another call's
// run answers Unavailable instead of running the handler too.
func TestSlowRunOneAtATime(t *testing.T) {
	rdb := setup(t)
	ns := namespace(t)
	var now, most atomic.Int64
	b := &backend{fn: func(context.Context, string, proto.Message, int64) (proto.Message, error) {
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(400 * time.Millisecond) // the backend's latency
		return nil, status.Error(codes.Unavailable, "backend down")
	}}
	var conns []*grpc.ClientConn
	for range 2 {
		g, err := guard.New(rdb, guard.Options{Namespace: ns, RedisTimeout: 10 * time.Second, WaitTimeout: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		conns = append(conns, serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet))}))
	}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			err := conns[i%2].Invoke(t.Context(), methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("call %d: %v, want Unavailable", i, err)
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got != 1 {
		t.Errorf("%d handler runs at once across the servers (%d in all), want 1", got, b.calls.Load())
	}
}

// TestStatusMessageNamesNoKey: a server KeyFunc may key by what the server
// knows of the caller (here an internal account id). Callers that wait
// past WaitTimeout for another call's failing run get Unavailable, whose
// message names the kind of failure, never the key (before, the guard's
// error text, with the key, was the message).
func TestStatusMessageNamesNoKey(t *testing.T) {
	rdb := setup(t)
	g, err := guard.New(rdb, guard.Options{Namespace: namespace(t), RedisTimeout: 10 * time.Second, WaitTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	b := &backend{fn: func(context.Context, string, proto.Message, int64) (proto.Message, error) {
		time.Sleep(400 * time.Millisecond)
		return nil, status.Error(codes.Unavailable, "backend down")
	}}
	kf := func(ctx context.Context, method string, req proto.Message) (string, bool) {
		return "internal-acct:4711:" + method + ":" + req.(*wrapperspb.StringValue).GetValue(), true
	}
	conn := sides[0].conn(t, g, b, guardgrpc.WithMethods(methodGet), guardgrpc.WithKeyFunc(kf))
	var mu sync.Mutex
	var msgs []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			err := conn.Invoke(t.Context(), methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue))
			mu.Lock()
			msgs = append(msgs, status.Convert(err).Message())
			mu.Unlock()
		})
	}
	wg.Wait()
	guardErrors := 0
	for _, m := range msgs {
		if strings.Contains(m, "internal-acct:4711") {
			t.Errorf("the guard key reached the client: %q", m)
		}
		if strings.HasPrefix(m, "guardgrpc: guard: ") {
			guardErrors++
		}
	}
	if guardErrors == 0 {
		t.Errorf("messages %q: no caller got the guard's error, the case this test is about", msgs)
	}
}

// TestLoadTimeoutIsUnavailable: a handler run the guard abandoned after
// its LoadTimeout answers the calls that waited for it Unavailable, as
// the package's other guard failures, not DeadlineExceeded: that said the
// caller's own deadline had passed when it had not, with the guard's text,
// and a retry policy on UNAVAILABLE did not retry. (guard.ErrLoadTimeout
// wraps context.DeadlineExceeded, which was checked first.)
func TestLoadTimeoutIsUnavailable(t *testing.T) {
	rdb := setup(t)
	g, err := guard.New(rdb, guard.Options{Namespace: namespace(t), RedisTimeout: 10 * time.Second, LoadTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	release := make(chan struct{})
	b := &backend{fn: func(ctx context.Context, m string, req proto.Message, n int64) (proto.Message, error) {
		<-release // ignores its context
		return echo(ctx, m, req, n)
	}}
	t.Cleanup(func() { close(release) })
	conn := serve(t, b, []grpc.UnaryServerInterceptor{guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods(methodGet))})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = invoke(ctx, conn, methodGet, wrapperspb.String("a"), new(wrapperspb.StringValue))
	if s := status.Convert(err); s.Code() != codes.Unavailable || !strings.HasPrefix(s.Message(), "guardgrpc: ") {
		t.Errorf("a call whose handler run was abandoned: %v; want Unavailable, guardgrpc: ...", err)
	}
}
