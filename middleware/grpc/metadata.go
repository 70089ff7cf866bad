package guardgrpc

import (
	"strings"

	"google.golang.org/grpc/metadata"
)

// transportMetadata is metadata gRPC itself, or the tracing every
// instrumented client sends, puts on calls: it never decides an answer, so
// it neither takes part in the key nor keeps a call from the cache.
// Prefixes end in "-" or ":".
var transportMetadata = []string{
	":",            // pseudo-headers: :authority (the name the client dialled)
	"content-type", // application/grpc[+proto]
	"user-agent",   // the client library's version
	"te",           // "trailers"
	"grpc-",        // grpc-accept-encoding, grpc-timeout, grpc-trace-bin, grpc-previous-rpc-attempts...
	"traceparent",  // W3C Trace Context: ids of the caller's span, new on every call
	"tracestate",
}

// unkeyed returns the first metadata key of md that is neither in the key
// (WithMetadata) nor declared ignorable (transport metadata,
// WithIgnoredMetadata, authorization with WithAllowAuthorization); "" if
// there is none. A handler may read such an entry (a tenant, a locale), so
// by default a call carrying one is not shared.
func (o *options) unkeyed(md metadata.MD) string {
	if o.ignoreAll {
		return ""
	}
	for k := range md {
		if !o.keyedOrIgnored(k) {
			return k
		}
	}
	return ""
}

func (o *options) keyedOrIgnored(k string) bool {
	for _, m := range o.metadata {
		if k == m {
			return true
		}
	}
	if o.allowAuth && k == "authorization" {
		return true
	}
	for _, p := range transportMetadata {
		if k == p || (strings.HasSuffix(p, "-") || strings.HasSuffix(p, ":")) && strings.HasPrefix(k, p) {
			return true
		}
	}
	for _, p := range o.ignored {
		if k == p {
			return true
		}
	}
	for _, p := range o.ignoredPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
