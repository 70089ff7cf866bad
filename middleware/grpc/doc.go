// Package guardgrpc puts a guard.Group in front of unary gRPC methods: one
// handler call in the whole fleet answers all the concurrent and later
// calls of a method with the same request, until the answer expires.
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		guardgrpc.UnaryServerInterceptor(g, guardgrpc.WithMethods("/catalog.v1.Catalog/GetProduct")),
//	))
//
// UnaryClientInterceptor does the same on the calling side, for callers of
// expensive RPCs.
//
// It is a module of its own (go get
// github.com/stampede-go/stampede/middleware/grpc), so that programs that
// do not use gRPC never have grpc-go in their module graph.
//
// # What is cached
//
// Only the methods listed with WithMethods; with none listed nothing is
// cached. Only OK answers that are proto messages, shared with every
// caller of the flight. A handler's error answers the call whose handler
// run it was, and no other: it is stored nowhere, and the other callers of
// its flight (the calls of this process that waited on it) each take a
// turn of their own, one at a time, until a run succeeds (its answer is
// then shared with those still waiting) or each has had its own run's
// error or left on its own deadline. One caller's error (a permission its
// credentials lack, a deadline of its own) never becomes another's.
// WithNegativeNotFound is the one exception: codes.NotFound is cached as
// guard.ErrNotFound for guard.Options.NegativeFor, and shared: the other
// callers of its flight, like later calls, get a NotFound with a generic
// message.
//
// Calls carrying "authorization" metadata (on the client, also a
// grpc.PerRPCCredentials call option) bypass the cache unless
// WithAllowAuthorization is given. The interceptors cannot see a
// connection's identity (mTLS, credentials set at dial time): a method
// whose answer depends on who calls must not be listed, or must be keyed
// by a KeyFunc.
//
// Interceptors chained before the server interceptor run for every call;
// those after it, and the handler, only for a run the cache needs. Chain
// authentication and authorization first: after the cache, a call served
// from it would skip them. On the client, metadata a later interceptor
// adds (a token) is not in the key.
//
// # The key
//
// The method's full name, the request's deterministic proto bytes
// (proto.MarshalOptions{Deterministic: true}: field and map order do not
// matter) and the values of the metadata keys listed with WithMetadata,
// each length-prefixed, hashed with SHA-256 behind a versioned prefix
// ("grpc:v2:"). WithKeyFunc replaces the key.
//
// A client call's key also holds the server it goes to: the connection's
// canonical target (grpc.ClientConn.CanonicalTarget) and the authority a
// grpc.CallAuthority call option sends, so one Group can serve connections
// to several servers (an EU and a US region) and each gets its own
// server's replies. A KeyFunc's key is scoped to them too, as a KeyFunc
// cannot see the connection. grpc-go does not expose the authority a
// connection was dialled with (grpc.WithAuthority, a TLS ServerName), nor
// the credentials of grpc.WithPerRPCCredentials, nor where a connection's
// dialer (grpc.WithContextDialer) or resolver (grpc.WithResolvers) sends
// its target: connections to one target that differ only in those, to a
// server answering by them or to different servers ("passthrough:///catalog"
// dialled to the EU on one connection and to the US on another), need
// Groups of their own (another Namespace). Server and client keys never
// coincide, so both interceptors may share a Group.
//
// # Metadata
//
// A handler sees all of its call's metadata, and may answer by a tenant
// id or a locale read from it. Had the key ignored such an entry, the
// first caller's answer would be served to every other tenant. So each
// entry of a call is keyed, ignored, or sends the call past the cache, by
// the first rule that names it:
//
//  1. Keyed: the keys listed with WithMetadata, whether the call carries
//     them or not.
//  2. Ignored: "authorization" with WithAllowAuthorization, and the keys
//     and prefixes listed with WithIgnoredMetadata.
//  3. Keyed by default, when the call carries them: ":authority" (the
//     name the client dialled, which a server hosting several names may
//     answer by, as an HTTP server by Host), forwarding and identity
//     metadata (below). WithUnkeyedForwarding ignores the forwarding
//     entries; WithIgnoredMetadata(":authority") lets clients that dial
//     one server by different names share its answers.
//  4. Ignored by default: the metadata of gRPC, tracing, correlation and
//     proxy bookkeeping (below).
//  5. Ignored with WithIgnoredMetadata("*").
//  6. Otherwise the call is not cached: its handler runs for it alone,
//     and the server answers cache-status
//     "stampede; fwd=bypass; detail=unkeyed-metadata". A bypass hook
//     (WithBypassHook) is told the entry's key.
//
// Ignored by default, as set by gRPC, a tracer or a proxy on every call,
// new on each one or steering only the transport, never carrying who
// calls:
//
//   - gRPC: keys starting with ":" other than ":authority"; the "grpc-" names
//     gRPC sets (grpc-accept-encoding, grpc-encoding, grpc-timeout,
//     grpc-message-type, grpc-previous-rpc-attempts, grpc-trace-bin,
//     grpc-tags-bin); content-type, user-agent, te. Any other "grpc-"
//     name a client sends reaches the handler, and is treated as any
//     other entry.
//   - Trace context: traceparent, tracestate (W3C); b3 and x-b3-* (B3,
//     Zipkin); uber-trace-id, jaeger-debug-id (Jaeger); x-amzn-trace-id
//     (AWS X-Ray); x-cloud-trace-context (Google Cloud); sentry-trace;
//     x-datadog-*; ot-tracer-* (OpenTracing); x-ot-span-context,
//     x-client-trace-id, x-envoy-force-trace (Envoy).
//   - Correlation: x-request-id (Envoy and Istio set a new one on every
//     request).
//   - Baggage: baggage (W3C, sent by OpenTelemetry's default propagators
//     whenever it holds an entry), jaeger-baggage, uberctx-*,
//     ot-baggage-*. Baggage is the propagated observability context; it
//     can carry anything, so a handler that answers by an item of it must
//     key it: WithMetadata("baggage").
//   - Envoy's bookkeeping on upstream calls and the retry and timeout
//     controls it reads: x-envoy-attempt-count, x-envoy-is-timeout-retry,
//     x-envoy-expected-rq-timeout-ms, x-envoy-upstream-stream-duration-ms,
//     x-envoy-upstream-rq-timeout-ms, x-envoy-upstream-rq-per-try-timeout-ms,
//     x-envoy-retry-on, x-envoy-retry-grpc-on, x-envoy-max-retries,
//     x-envoy-hedge-on-per-try-timeout, x-envoy-decorator-operation.
//
// Other x-envoy-* entries are not ignored: some say who calls.
//
// Forwarding metadata, keyed by default: forwarded, x-forwarded-for,
// x-forwarded-host, x-forwarded-proto, x-forwarded-port,
// x-forwarded-prefix, x-forwarded-protocol, x-forwarded-scheme,
// x-forwarded-server, x-forwarded-ssl, x-forwarded-uri, x-real-ip,
// true-client-ip, front-end-https, x-host, x-original-host,
// x-original-uri, x-original-url, x-scheme, x-url-scheme,
// x-envoy-external-address, x-envoy-original-path. A proxy says there what
// the client asked for and from where; a handler may build a link or pick
// a region from it, and a client can send it itself. Keyed, a call is
// served only an answer made for the same values; calls with the same
// values still share one answer, and concurrent ones one handler run.
// Behind a proxy that sets the same values on every call (a mesh's
// x-forwarded-proto) nothing changes; a client address that differs per
// end user (x-forwarded-for behind an edge proxy) splits sharing per
// address. WithUnkeyedForwarding trades that back when the handlers read
// none of it. (The HTTP engine leaves client addresses out of its key,
// as a response that depends on one names it in Vary; a gRPC answer has
// no Vary, so here they stay keyed.)
//
// Identity metadata, keyed by default, also with WithUnkeyedForwarding:
// x-forwarded-client-cert (the caller's certificate, set by Envoy and
// Istio on mTLS calls), x-envoy-peer-metadata, x-envoy-peer-metadata-id
// (Istio's calling workload), x-envoy-internal,
// x-envoy-downstream-service-cluster, x-envoy-downstream-service-node.
// Each caller identity gets answers made for it. A method whose answer
// does not depend on the caller may ignore them by name, as
// WithIgnoredMetadata("x-forwarded-client-cert").
//
// A KeyFunc decides for itself; none of these rules applies.
//
// # Bypassed calls
//
// A call of a listed method that goes past the cache is answered by its
// own handler (on the client, by the server), and reported to the hook of
// WithBypassHook with a BypassReason: authorization, unkeyed metadata
// (with the entry's key, which is never sent to the client), a KeyFunc
// that declined, a request or answer that is not a proto message or does
// not marshal, a stored entry this binary cannot decode, a closed Group.
// Counting them shows protection turning off: a proxy that starts adding
// an entry to every call, say.
//
// # The stored answer
//
// The answer is stored as its message's full name followed by its proto
// bytes. A node serving a cached answer builds a new message of that type
// and unmarshals into it, so it needs no handler run of its own and no
// per-method configuration: the type is the one this process's handler has
// answered the method with (an entry of another type is refused), else the
// one protoregistry.GlobalTypes holds under that name: every generated
// message registers itself there. A node that has not answered the method
// yet checks the entry's type against the method's output type, where
// protoregistry.GlobalFiles describes the method (generated code
// registers its files; a hand-written grpc.ServiceDesc has no descriptor,
// and its entries are trusted by type name until the process answers the
// method once). An entry whose type the binary lacks, or that is not the
// method's, is another build's (a rolling deploy): it is bypassed, the
// handler answers, and the entry expires on its own.
// Garbage (not an answer, or an answer of its type that does not
// unmarshal) is dropped by the calls that find it, which share one run to
// refill it, as a miss does; if the refill is garbage too, it is bypassed.
// The client
// interceptor unmarshals into the caller's reply after proto.Reset, if the
// stored type is the reply's.
//
// Each caller gets its own message; the caller whose handler run produced
// the answer gets the handler's message itself.
//
// # Misuse
//
// A programmer error that the package can see makes it panic, with a
// message starting "guardgrpc: ", when the interceptor or the option is
// built, so that it surfaces when the program starts instead of as a
// cache that silently holds nothing or as calls failing one by one: a nil
// Group, a nil Option or KeyFunc, a name given to WithMethods that is not a
// full method name ("Check" for "/grpc.health.v1.Health/Check"), a
// negative duration guard would refuse (guard.Disabled is accepted where
// guard accepts it), a metadata key that cannot be one, a key both keyed
// and ignored, and options another one makes useless (WithMetadata or
// WithIgnoredMetadata beside WithKeyFunc, "authorization" keyed without
// WithAllowAuthorization). A call is never failed for the configuration.
//
// A name that is well formed but wrong ("/catalog.Catalog/GetProduct"
// for a service in package catalog.v1) matches no call, so nothing is
// cached for it. CheckMethods checks the names against the services
// registered on a *grpc.Server, before it serves, and names each one it
// does not serve as a unary method, with the method probably meant. While
// the interceptor runs, WithUnmatchedHook and WithLogger report, once, a
// listed method that no call matches: at the first call of the same
// service and method in another package, or after 1,000 calls of other
// methods.
//
// # Guarantees
//
//   - The handler runs detached from the cancellation of the call that
//     started it (context.WithoutCancel, bounded by
//     guard.Options.LoadTimeout): a caller that leaves does not fail the
//     others, and each caller leaves on its own deadline. It sees that
//     call's context values and metadata, so it must depend only on what
//     the key covers. Header and trailer metadata it sets reach that call
//     alone and are not cached. A background refresh runs on the stream of
//     the call that started it, served stale (grpc-go's stream, so that
//     grpc.SetSendCompressor and the like work in every run): what it sets
//     reaches that call if the call's answer has not gone out yet (an
//     interceptor before this one still at work), and nobody else.
//   - A handler panic answers codes.Internal to the call whose run
//     panicked, as any other error; it is not cached, and the process
//     survives. So does a handler's runtime.Goexit (the handler runs on a
//     goroutine of its own, which it ends), where a bare server would
//     leave the call unanswered.
//   - The server sets the response header "cache-status" (HeaderCacheStatus)
//     on every cacheable call; it never carries the key, and neither does
//     a status message: a guard error reaches the client as its kind
//     (guard.ErrBackoff's text, say), the rest going to hooks.
package guardgrpc
