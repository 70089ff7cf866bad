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
// cached. Only OK answers that are proto messages: a handler's error
// reaches the callers of its flight (the calls of this process that shared
// it) and is stored nowhere, so the next call runs the handler again.
// WithNegativeNotFound is the one exception: codes.NotFound is cached as
// guard.ErrNotFound for guard.Options.NegativeFor.
//
// Calls carrying "authorization" metadata (on the client, also a
// grpc.PerRPCCredentials call option) bypass the cache unless
// WithAllowAuthorization is given. The interceptors cannot see a
// connection's identity (mTLS, credentials set at dial time): a method
// whose answer depends on who calls must not be listed, or must be keyed
// by a KeyFunc.
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
// the credentials of grpc.WithPerRPCCredentials: connections to one target
// that differ only in those, to a server answering by them, need Groups
// of their own (another Namespace). Server and client keys never
// coincide, so both interceptors may share a Group.
//
// # Metadata the key does not hold
//
// A handler sees all of its call's metadata, and may answer by a tenant
// id or a locale read from it. Had the key ignored such an entry, the
// first caller's answer would be served to every other tenant. So a call
// carrying metadata that is neither keyed (WithMetadata) nor ignorable is
// not cached: its handler runs for it alone, and the server answers
// cache-status "stampede; fwd=bypass; detail=unkeyed-metadata". Ignorable
// are the entries of the transport, which never decide an answer: keys
// starting with ":" (":authority") or "grpc-", content-type, user-agent,
// te, and the W3C Trace Context entries traceparent and tracestate (new on
// every traced call); "authorization" too with WithAllowAuthorization.
// A server answering by the name the client dialled keys it:
// WithMetadata(":authority").
// Declare more with WithIgnoredMetadata ("x-request-id", "x-b3-*"), or
// "*" to ignore everything not listed, as versions before this rule did.
// A KeyFunc decides for itself.
//
// # The stored answer
//
// The answer is stored as its message's full name followed by its proto
// bytes. A node serving a cached answer builds a new message of that type
// and unmarshals into it, so it needs no handler run of its own and no
// per-method configuration: the type is the one this process's handler has
// answered the method with (an entry of another type is refused), else the
// one protoregistry.GlobalTypes holds under that name: every generated
// message registers itself there. (Method descriptors would not do:
// services registered from a hand-written grpc.ServiceDesc have none.) An
// entry whose type the binary lacks or that does not decode is bypassed:
// the handler answers, and the entry expires on its own. The client
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
// # Guarantees
//
//   - The handler runs detached from the cancellation of the call that
//     started it (context.WithoutCancel, bounded by
//     guard.Options.LoadTimeout): a caller that leaves does not fail the
//     others, and each caller leaves on its own deadline. It sees that
//     call's context values and metadata, so it must depend only on what
//     the key covers. Header and trailer metadata it sets reach that call
//     alone (none, if it runs as a background refresh) and are not cached.
//   - A handler panic answers codes.Internal to the callers of its flight,
//     is not cached, and the process survives.
//   - The server sets the response header "cache-status" (HeaderCacheStatus)
//     on every cacheable call; it never carries the key.
package guardgrpc
