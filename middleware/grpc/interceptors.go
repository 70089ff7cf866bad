package guardgrpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
)

// HeaderCacheStatus is the response header metadata key that says how the
// server interceptor answered a cacheable call, in the manner of RFC 9211
// Cache-Status: "stampede; hit", "stampede; fwd=stale",
// "stampede; fwd=miss", "stampede; fwd=miss; collapsed" (another caller's
// load was shared), "stampede; fwd=miss; detail=degraded" (Redis
// unavailable), "stampede; fwd=bypass" or
// "stampede; fwd=bypass; detail=unkeyed-metadata" (the call carries
// metadata neither keyed nor declared ignorable): the values of package
// [cachestatus]. It never carries the key, nor the name of the metadata
// entry.
const HeaderCacheStatus = "cache-status"

// statusUnkeyed: the call carries metadata the key does not hold and that
// was not declared ignorable (WithMetadata, WithIgnoredMetadata).
const statusUnkeyed = cachestatus.Bypass + "; detail=unkeyed-metadata"

var deterministic = proto.MarshalOptions{Deterministic: true}

// cache is the state both interceptors share.
type cache struct {
	g *guard.Group
	o *options
	w *watch // listed methods no call matches; nil unless reported somewhere
	// types holds, per method, the type of the answers this process has
	// produced: it resolves types absent from protoregistry.GlobalTypes
	// (dynamicpb, say) and rejects an entry of another type (written by an
	// older build whose method answered differently).
	types sync.Map // full method → protoreflect.MessageType
	// outputs holds, per method, its output type as protoregistry
	// describes it ("" when it does not).
	outputs sync.Map // full method → protoreflect.FullName
	// drops coalesces, per key, the calls that found garbage under it
	// (dropGarbage).
	drops singleflight.Group
}

func newCache(g *guard.Group, opts []Option) *cache {
	if g == nil {
		misuse("nil *guard.Group")
	}
	o := evaluateOptions(opts)
	return &cache{g: g, o: o, w: newWatch(o)}
}

// key returns the guard key of a call sent to d; reqBytes, when not nil,
// are the request's deterministic bytes. When the call must bypass the
// cache, reason says why, and mdKey names the metadata entry responsible
// if one is.
func (c *cache) key(ctx context.Context, d dest, method string, req proto.Message, reqBytes []byte, md metadata.MD) (key string, reason BypassReason, mdKey string) {
	if !c.o.allowAuth && len(md["authorization"]) > 0 {
		return "", BypassAuthorization, ""
	}
	if c.o.keyFunc != nil {
		// A KeyFunc decides for itself what the answer depends on.
		// A key the guard would refuse (empty, or past MaxKeyBytes: a
		// client may choose the field it holds) goes past the cache too.
		if key, ok := c.o.keyFunc(ctx, method, req); ok && (d.client || key != "" && len(key) <= guard.MaxKeyBytes) {
			return funcKey(d, key), "", ""
		}
		return "", BypassKeyFunc, ""
	}
	present, unkeyed := c.o.scan(md)
	if unkeyed != "" {
		return "", BypassUnkeyedMetadata, unkeyed
	}
	if reqBytes == nil {
		var err error
		if reqBytes, err = deterministic.Marshal(req); err != nil {
			return "", BypassRequestMarshal, ""
		}
	}
	return requestKey(d, method, reqBytes, md, c.o.metadata, present), "", ""
}

func (c *cache) encode(method string, m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	mt := m.ProtoReflect().Type()
	if old, ok := c.types.Load(method); !ok || old != mt {
		c.types.Store(method, mt)
	}
	return encodeValue(mt.Descriptor().FullName(), b), nil
}

// messageType resolves the type of a cached answer of method: the type
// this process has answered method with; else, for a method protoregistry
// describes (generated code registers its files), its output type; else
// any type linked into the binary. An entry of another type than the
// method's (an older build's, whose method answered differently) is an
// error: its bytes are another message's.
func (c *cache) messageType(method string, name protoreflect.FullName) (protoreflect.MessageType, error) {
	if v, ok := c.types.Load(method); ok {
		mt := v.(protoreflect.MessageType)
		if got := mt.Descriptor().FullName(); got != name {
			return nil, fmt.Errorf("guardgrpc: cached %s, %s answers %s", name, method, got)
		}
		return mt, nil
	}
	if out := c.outputType(method); out != "" && out != name {
		return nil, fmt.Errorf("guardgrpc: cached %s, %s answers %s", name, method, out)
	}
	return protoregistry.GlobalTypes.FindMessageByName(name)
}

// outputType returns the output type of method ("/pkg.Service/Method") as
// protoregistry.GlobalFiles describes it, or "" if it does not; looked up
// once per method.
func (c *cache) outputType(method string) protoreflect.FullName {
	if v, ok := c.outputs.Load(method); ok {
		return v.(protoreflect.FullName)
	}
	var out protoreflect.FullName
	if service, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/"); ok {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
		if sd, isService := d.(protoreflect.ServiceDescriptor); err == nil && isService {
			if md := sd.Methods().ByName(protoreflect.Name(name)); md != nil {
				out = md.Output().FullName()
			}
		}
	}
	c.outputs.Store(method, out)
	return out
}

func (c *cache) decode(method string, v []byte) (proto.Message, error) {
	name, b, err := decodeValue(v)
	if err != nil {
		return nil, err
	}
	mt, err := c.messageType(method, name)
	if err != nil {
		return nil, err
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadValue, err)
	}
	return m, nil
}

// dropGarbage drops the entry under key when err says the answer seen
// there is garbage (not an answer, or one of its type that does not
// unmarshal), and reports whether the caller should ask the guard once
// more: the calls that found the garbage then share one run that stores a
// good answer, instead of each running its own until the entry expires.
// The calls of this process that found it share one drop, which drops
// the entry only if it still holds what was seen: a call that read the
// garbage before another dropped it and a run refilled it must not drop
// the refill. An answer of a type this binary lacks, or does not answer
// the method with, is another build's, not garbage: it stays (two builds
// would otherwise drop each other's answers for as long as a rolling
// deploy lasts).
func (c *cache) dropGarbage(ctx context.Context, key string, seen []byte, err error) bool {
	if !errors.Is(err, errBadValue) {
		return false
	}
	// The first call's context without its cancellation (the guard bounds
	// each Redis call by RedisTimeout): that caller leaving must not
	// decide the answer of the calls that joined its drop.
	ctx = context.WithoutCancel(ctx)
	again, _, _ := c.drops.Do(key, func() (any, error) {
		res, err := c.g.Peek(ctx, key)
		switch {
		case err == nil && bytes.Equal(res.Value, seen):
			return c.g.Invalidate(ctx, key) == nil, nil
		case err == nil || errors.Is(err, guard.ErrNotCached):
			return true, nil // dropped, or refilled, meanwhile
		}
		return false, nil // Redis or the guard in trouble: bypass
	})
	return again.(bool)
}

// failure maps an error of guard.Do that is not the handler's own.
func failure(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, guard.ErrNotFound):
		return notFoundCached
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	// The guard's errors name the key, which may hold what the server
	// knows of the caller (a KeyFunc's account id): the client gets the
	// kind of failure only; hooks and logs have the rest. Before the
	// context errors: ErrLoadTimeout wraps DeadlineExceeded, and is no
	// deadline of the caller's.
	for _, kind := range publicErrors {
		if errors.Is(err, kind) {
			return status.Error(codes.Unavailable, "guardgrpc: "+kind.Error())
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, "guardgrpc: the cache could not answer")
}

// publicErrors are the guard's errors whose text a client may read.
var publicErrors = []error{guard.ErrWaitTimeout, guard.ErrBackoff, guard.ErrLoadTimeout, guard.ErrGoexit, guard.ErrClosed}

// UnaryServerInterceptor caches the OK answers of the methods listed with
// WithMethods in g, so that one handler call in the fleet answers every
// concurrent and later call with the same key until the answer expires.
// See the package doc for what is cached and how. It panics on misuse: a
// nil g, a nil Option, options that contradict each other (see the package
// doc).
func UnaryServerInterceptor(g *guard.Group, opts ...Option) grpc.UnaryServerInterceptor {
	c := newCache(g, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := info.FullMethod
		if !c.o.methods[method] {
			c.w.other(ctx, method)
			return handler(ctx, req)
		}
		c.w.matched(method)
		msg, ok := req.(proto.Message)
		if !ok {
			c.pass(ctx, method, BypassNotProto, "")
			return c.direct(ctx, method, req, handler)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		key, reason, mdKey := c.key(ctx, dest{}, method, msg, nil, md)
		if reason != "" {
			c.pass(ctx, method, reason, mdKey)
			return c.direct(ctx, method, req, handler)
		}

		for again := true; ; again = false {
			res, own, err := c.do(ctx, key, func(own *atomic.Pointer[answer]) guard.LoadFunc {
				return c.serverLoad(method, handler, req, own)
			})
			if err != nil {
				f := c.failed(ctx, own, err)
				if f.status != "" {
					setStatus(ctx, f.status)
				}
				if !f.direct {
					return nil, f.err
				}
				c.bypassed(ctx, method, f.reason, "")
				if own != nil && own.err == nil {
					return own.resp, nil // this call's own run, not storable
				}
				return c.direct(ctx, method, req, handler)
			}
			// The answer of this call's own handler run needs no decoding. A
			// hit or stale answer comes from the cache even if this call's
			// load runs in the background meanwhile.
			if a := own; a != nil && res.Status != guard.Hit && res.Status != guard.Stale {
				// This call's own run answered: stored (whoever claimed the
				// flight's Miss), unless Redis was out of the picture.
				st := cachestatus.Stored
				if res.Status == guard.Degraded {
					st = cachestatus.Degraded
				}
				setStatus(ctx, st)
				return a.resp, nil
			}
			resp, err := c.decode(method, res.Value)
			if err != nil {
				if again && c.dropGarbage(ctx, key, res.Value, err) {
					continue // the calls that found it share one refill
				}
				// An entry of a type this binary does not know (another
				// build's), or garbage again: answer from the handler;
				// the entry expires on its own.
				c.pass(ctx, method, BypassUndecodable, "")
				return c.direct(ctx, method, req, handler)
			}
			st := res.Status
			if st == guard.Miss {
				st = guard.Shared // the flight's load was another caller's
			}
			setStatus(ctx, cachestatus.Of(st))
			return resp, nil
		}
	}
}

// direct runs handler for a call of a listed method that goes past the
// cache, as a cached run would run it: a panic or a runtime.Goexit answers
// codes.Internal to this call alone, and the process survives. Otherwise
// any client could turn a handler's panic into the server's crash with
// one metadata entry that sends its call past the cache.
func (c *cache) direct(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	var resp any
	err := safely(func() (err error) {
		resp, err = handler(ctx, req)
		return err
	})
	if he, ok := err.(*handlerError); ok {
		if l := c.o.logger; l != nil {
			if he.panicked != nil {
				l.ErrorContext(ctx, "guardgrpc: handler panicked", "method", method, "panic", fmt.Sprint(he.panicked), "stack", string(he.stack))
			} else {
				l.ErrorContext(ctx, "guardgrpc: handler called runtime.Goexit", "method", method)
			}
		}
		return nil, he.err
	}
	return resp, err
}

// pass reports a server call that its handler answers alone, and says so
// in its cache-status; the metadata key stays on the server.
func (c *cache) pass(ctx context.Context, method string, reason BypassReason, mdKey string) {
	st := cachestatus.Bypass
	if reason == BypassUnkeyedMetadata {
		st = statusUnkeyed
	}
	setStatus(ctx, st)
	c.bypassed(ctx, method, reason, mdKey)
}

// setStatus sets the cache-status response header. It fails, harmlessly,
// when the handler has sent its headers already.
func setStatus(ctx context.Context, v string) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderCacheStatus, v))
}

// UnaryClientInterceptor caches, in g, the OK replies of the methods listed
// with WithMethods, for callers of expensive RPCs: one call in the fleet
// reaches the server for each key until the reply expires, and every call
// gets its reply filled from the cache. The keying rules are those of
// UnaryServerInterceptor, with the outgoing metadata; the key also holds
// the server the call goes to (see the package doc), so one Group may
// serve connections to several servers.
//
// The cached call runs detached from the caller's cancellation (bounded by
// guard.Options.LoadTimeout), with the caller's call options except
// grpc.Header, grpc.Trailer, grpc.Peer and grpc.OnFinish, which could
// otherwise fire after the caller has returned: grpc.Header receives the
// cache-status (and only it), grpc.OnFinish is called with the caller's
// outcome, grpc.Trailer and grpc.Peer stay empty. It panics on misuse, as
// UnaryServerInterceptor does.
func UnaryClientInterceptor(g *guard.Group, opts ...Option) grpc.UnaryClientInterceptor {
	c := newCache(g, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) (err error) {
		if !c.o.methods[method] {
			c.w.other(ctx, method)
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		c.w.matched(method)
		// pass sends the call to the server as it is, reported.
		pass := func(reason BypassReason, mdKey string) error {
			c.bypassed(ctx, method, reason, mdKey)
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		in, ok1 := req.(proto.Message)
		out, ok2 := reply.(proto.Message)
		switch {
		case cc == nil:
			return pass(BypassNoConn, "")
		case !ok1 || !ok2:
			return pass(BypassNotProto, "")
		case !c.o.allowAuth && hasPerRPCCreds(callOpts):
			return pass(BypassAuthorization, "")
		}
		// The request is snapshotted: a load may run after the caller has
		// returned and reused req.
		reqBytes, err := deterministic.Marshal(in)
		if err != nil {
			return pass(BypassRequestMarshal, "")
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		key, reason, mdKey := c.key(ctx, destOf(cc, callOpts), method, in, reqBytes, md)
		if reason != "" {
			return pass(reason, mdKey)
		}

		loadOpts, finish := splitCallOptions(callOpts)
		defer func() {
			for _, f := range finish {
				f(err)
			}
		}()
		// direct calls the server itself; grpc then calls OnFinish.
		direct := func(reason BypassReason) error {
			finish = nil
			return pass(reason, "")
		}
		reqType, replyType := in.ProtoReflect().Type(), out.ProtoReflect().Type()
		for again := true; ; again = false {
			res, own, err := c.do(ctx, key, func(own *atomic.Pointer[answer]) guard.LoadFunc {
				return c.clientLoad(method, cc, invoker, reqType, replyType, reqBytes, loadOpts, own)
			})
			if err != nil {
				f := c.failed(ctx, own, err)
				if !f.direct {
					if f.status != "" {
						setHeaderOptions(callOpts, f.status)
					}
					return f.err
				}
				if own != nil && own.err == nil {
					// This call's own run, not storable: its reply as it is.
					c.bypassed(ctx, method, f.reason, "")
					proto.Reset(out)
					proto.Merge(out, own.resp.(proto.Message))
					return nil
				}
				return direct(f.reason)
			}
			if err := fillReply(out, res.Value, replyType.Descriptor().FullName()); err != nil {
				if again && c.dropGarbage(ctx, key, res.Value, err) {
					continue // the calls that found it share one refill
				}
				return direct(BypassUndecodable)
			}
			setHeaderOptions(callOpts, cachestatus.Of(res.Status))
			return nil
		}
	}
}

// fillReply decodes the cached value v into out, a reply of type want. On
// an error, out is left reset.
func fillReply(out proto.Message, v []byte, want protoreflect.FullName) error {
	name, b, err := decodeValue(v)
	if err == nil && name != want {
		err = fmt.Errorf("guardgrpc: cached %s, want %s", name, want)
	}
	if err == nil {
		proto.Reset(out)
		if err = proto.Unmarshal(b, out); err != nil {
			err = fmt.Errorf("%w: %v", errBadValue, err)
		}
	}
	if err != nil {
		proto.Reset(out)
	}
	return err
}

func hasPerRPCCreds(opts []grpc.CallOption) bool {
	for _, o := range opts {
		switch o.(type) {
		case grpc.PerRPCCredsCallOption, *grpc.PerRPCCredsCallOption:
			return true
		}
	}
	return false
}

// splitCallOptions drops the options that write to the caller's memory (or
// call back) when the call ends, returning the OnFinish callbacks.
func splitCallOptions(opts []grpc.CallOption) (keep []grpc.CallOption, finish []func(error)) {
	keep = make([]grpc.CallOption, 0, len(opts))
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption, *grpc.HeaderCallOption,
			grpc.TrailerCallOption, *grpc.TrailerCallOption,
			grpc.PeerCallOption, *grpc.PeerCallOption:
		case grpc.OnFinishCallOption:
			finish = append(finish, o.OnFinish)
		case *grpc.OnFinishCallOption:
			finish = append(finish, o.OnFinish)
		default:
			keep = append(keep, o)
		}
	}
	return keep, finish
}

// setHeaderOptions hands the cache status to grpc.Header options.
func setHeaderOptions(opts []grpc.CallOption, v string) {
	for _, o := range opts {
		var addr *metadata.MD
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			addr = o.HeaderAddr
		case *grpc.HeaderCallOption:
			addr = o.HeaderAddr
		}
		if addr != nil {
			*addr = metadata.Pairs(HeaderCacheStatus, v)
		}
	}
}
