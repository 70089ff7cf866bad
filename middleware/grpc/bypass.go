package guardgrpc

import "context"

// BypassReason says why a call of a method listed with WithMethods went
// past the cache: its handler (on the client, the server) answered it
// alone, and nothing was stored. The values form a small fixed set, fit
// for a metric label.
type BypassReason string

// The reasons a call bypasses the cache.
const (
	// BypassAuthorization: the call carries "authorization" metadata or,
	// on the client, a grpc.PerRPCCredentials call option, and
	// WithAllowAuthorization was not given.
	BypassAuthorization BypassReason = "authorization"
	// BypassUnkeyedMetadata: the call carries a metadata entry that is
	// neither keyed nor ignorable; BypassInfo.Metadata names it.
	BypassUnkeyedMetadata BypassReason = "unkeyed-metadata"
	// BypassKeyFunc: the KeyFunc of WithKeyFunc declined the call.
	BypassKeyFunc BypassReason = "key-func"
	// BypassNotProto: the request (on the client, or the reply) is not a
	// proto message.
	BypassNotProto BypassReason = "not-proto"
	// BypassRequestMarshal: the request does not marshal (invalid UTF-8
	// in a string field, a proto2 required field unset...).
	BypassRequestMarshal BypassReason = "request-marshal"
	// BypassUnstorable: the answer could not be stored (the handler
	// answered with something that is not a proto message, or it did not
	// marshal); the callers that shared its flight were answered by their
	// own handler runs.
	BypassUnstorable BypassReason = "unstorable-answer"
	// BypassUndecodable: the stored answer is of a type this binary does
	// not have or does not answer the method with (another build's); it
	// expires on its own. Garbage is dropped and refilled once first: it
	// is bypassed only if the refill is garbage too.
	BypassUndecodable BypassReason = "undecodable-entry"
	// BypassClosed: the Group is closed (the process is shutting down).
	BypassClosed BypassReason = "group-closed"
	// BypassNoConn: a client call came without a *grpc.ClientConn (an
	// interceptor called by hand), so the server it goes to is unknown.
	BypassNoConn BypassReason = "no-connection"
)

// BypassInfo describes a call that went past the cache, for the hook of
// WithBypassHook.
type BypassInfo struct {
	FullMethod string       // "/package.Service/Method"
	Reason     BypassReason // why
	// Metadata is, with BypassUnkeyedMetadata, the key of the entry that
	// sent the call past the cache (the first by name, if several did):
	// the name to key (WithMetadata) or declare ignorable
	// (WithIgnoredMetadata). Never a value. It is not sent to the client.
	Metadata string
}

// bypassed reports a call that goes past the cache to the hook, if any.
func (c *cache) bypassed(ctx context.Context, method string, reason BypassReason, md string) {
	if h := c.o.bypassHook; h != nil {
		h(ctx, BypassInfo{FullMethod: method, Reason: reason, Metadata: md})
	}
}
