package guardgrpc

import (
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// answer is the outcome of a call's own handler (or invoker) run, kept for
// that call: it needs no decoding, and a failure reaches the call as it is
// even when the guard answers it from an entry the run has just stored.
type answer struct {
	resp any
	err  error
}

// do runs the guard for one call; load makes the call's guard load,
// recording its run in own. It returns the guard's answer and this call's
// own run, if it had one.
//
// A failure belongs to the call whose run failed: its context, credentials
// or peer may be why. So a failed run answers the guard with
// guard.Private, and the guard hands it to that call alone: the other
// calls of its flight, in this process and on other servers, take turns
// at the handler, one run at a time across the fleet, until one answer is
// stored and shared, or leave on their own context (or, past the Group's
// WaitTimeout, with Unavailable). A NotFound negative-cached with
// WithNegativeNotFound is shared, as it is stored.
func (c *cache) do(ctx context.Context, key string, load func(own *atomic.Pointer[answer]) guard.LoadFunc) (guard.Result, *answer, error) {
	var own atomic.Pointer[answer]
	res, err := c.g.Do(ctx, key, load(&own), c.o.callOpts...)
	return res, own.Load(), err
}

// serverLoad is the guard load of a server call: the handler's run,
// recorded in own, its answer encoded for the cache. The guard runs it at
// most once per call.
func (c *cache) serverLoad(method string, handler grpc.UnaryHandler, req any, own *atomic.Pointer[answer]) guard.LoadFunc {
	return func(lctx context.Context) ([]byte, error) {
		var resp any
		err := safely(func() (err error) {
			resp, err = handler(lctx, req)
			return err
		})
		if err != nil {
			own.Store(&answer{err: callerError(err)})
			return nil, c.o.loadError(err)
		}
		own.Store(&answer{resp: resp})
		m, ok := resp.(proto.Message)
		if !ok {
			return nil, guard.NoStore(errUncacheable)
		}
		v, err := c.encode(method, m)
		if err != nil {
			return nil, guard.NoStore(errUncacheable)
		}
		return v, nil
	}
}

// clientLoad is the guard load of a client call: the invoker run on a
// snapshot of the request (the load may outlive the caller, who may reuse
// req), recorded in own, the reply encoded for the cache.
func (c *cache) clientLoad(method string, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, reqType, replyType protoreflect.MessageType,
	reqBytes []byte, opts []grpc.CallOption, own *atomic.Pointer[answer]) guard.LoadFunc {
	return func(lctx context.Context) ([]byte, error) {
		req := reqType.New().Interface()
		if err := proto.Unmarshal(reqBytes, req); err != nil {
			he := &handlerError{err: status.Errorf(codes.Internal, "guardgrpc: request snapshot: %v", err)}
			own.Store(&answer{err: he.err})
			return nil, guard.NoStore(he)
		}
		reply := replyType.New().Interface()
		if err := safely(func() error { return invoker(lctx, method, req, reply, cc, opts...) }); err != nil {
			own.Store(&answer{err: callerError(err)})
			return nil, c.o.loadError(err)
		}
		own.Store(&answer{resp: reply})
		v, err := c.encode(method, reply)
		if err != nil {
			return nil, guard.NoStore(errUncacheable)
		}
		return v, nil
	}
}

// doFailure is how a call answers when guard.Do returned an error.
type doFailure struct {
	status string       // the cache-status to send, or ""
	err    error        // the call's error, unless direct
	direct bool         // answer from the handler (or server) directly
	reason BypassReason // why, when direct
}

// failed maps an error of do, for a call whose own run (if any) ended as
// own: both interceptors answer the same way. A failed run's error
// reaches the call that ran it, and no other.
func (c *cache) failed(ctx context.Context, own *answer, err error) doFailure {
	switch {
	case own != nil && own.err != nil:
		return doFailure{status: cachestatus.Miss, err: own.err}
	case errors.Is(err, errNotFoundShared):
		// Another call's run answered NotFound, negative-cached: shared
		// as a later call reads it from the cache.
		return doFailure{status: cachestatus.Collapsed, err: notFoundCached}
	case errors.Is(err, errUncacheable):
		return doFailure{status: cachestatus.Bypass, direct: true, reason: BypassUnstorable}
	case errors.Is(err, guard.ErrClosed):
		return doFailure{status: cachestatus.Bypass, direct: true, reason: BypassClosed}
	case errors.Is(err, guard.ErrNotFound):
		return doFailure{status: cachestatus.Hit, err: notFoundCached}
	}
	return doFailure{err: failure(ctx, err)}
}
