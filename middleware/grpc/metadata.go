package guardgrpc

import (
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
)

// What the key does with a metadata entry of a call.
type mdRule uint8

const (
	mdBypass  mdRule = iota // neither keyed nor ignorable: the call is not shared
	mdIgnore                // never decides an answer: not in the key
	mdKeyed                 // keyed with WithMetadata, present or not
	mdDefault               // keyed by default, when present
)

// Entries ignored by default. Names are exact; prefixes end in "-" or ":".
// Each one is set by gRPC itself, a tracer or a proxy, differs from call
// to call or only steers the transport, and carries no identity: an
// answer that depended on one would be a handler bug.
var (
	ignoredNames = []string{
		// gRPC's own (a client may send other "grpc-" names, which reach
		// the handler: those are treated as any other entry).
		"content-type",               // application/grpc[+proto]
		"user-agent",                 // the client library's version
		"te",                         // "trailers"
		"grpc-accept-encoding",       // the compressors the client takes
		"grpc-encoding",              // the request's compressor
		"grpc-timeout",               // the deadline, as sent
		"grpc-message-type",          // the message's type name
		"grpc-previous-rpc-attempts", // retries made so far
		"grpc-trace-bin",             // OpenCensus trace context
		"grpc-tags-bin",              // OpenCensus tags

		// Trace context: ids of the caller's span, new on every call.
		"traceparent", "tracestate", // W3C Trace Context
		"b3",                    // B3 single header (Zipkin, Envoy)
		"uber-trace-id",         // Jaeger
		"jaeger-debug-id",       // Jaeger: forces sampling
		"x-amzn-trace-id",       // AWS X-Ray (ALB, API Gateway)
		"x-cloud-trace-context", // Google Cloud Trace
		"sentry-trace",          // Sentry
		"x-ot-span-context",     // Envoy's Lightstep tracer
		"x-client-trace-id",     // Envoy: a client's trace id, joined into x-request-id
		"x-envoy-force-trace",   // Envoy: forces sampling

		// Correlation: one id per request, by design never the same.
		"x-request-id", // Envoy and Istio generate it on every request

		// Baggage: the propagated observability context (OpenTelemetry's
		// default propagators send it whenever it holds an entry). An
		// answer read from baggage must key it: WithMetadata("baggage").
		"baggage", "jaeger-baggage",

		// Envoy's router, on upstream requests: attempt and timeout
		// bookkeeping, and the retry and timeout controls it consumes.
		"x-envoy-attempt-count",
		"x-envoy-is-timeout-retry",
		"x-envoy-expected-rq-timeout-ms",
		"x-envoy-upstream-stream-duration-ms",
		"x-envoy-upstream-rq-timeout-ms",
		"x-envoy-upstream-rq-per-try-timeout-ms",
		"x-envoy-retry-on",
		"x-envoy-retry-grpc-on",
		"x-envoy-max-retries",
		"x-envoy-hedge-on-per-try-timeout",
		"x-envoy-decorator-operation", // the span's name
	}
	ignoredPrefixes = []string{
		":",           // pseudo-headers other than :authority (keyed: authorityMetadata)
		"x-b3-",       // B3 multi-header: traceid, spanid, parentspanid, sampled, flags
		"x-datadog-",  // Datadog: trace-id, parent-id, sampling-priority, origin, tags
		"ot-tracer-",  // OpenTracing basic tracer: traceid, spanid, sampled
		"uberctx-",    // Jaeger baggage, one entry per item
		"ot-baggage-", // OpenTracing baggage, one entry per item
	}
)

// forwardingMetadata is what a proxy says about the original request: the
// client's address, the host, scheme, port or path it asked for. A handler
// may read it (to build a link, to pick a region by address), and a client
// can send any of it itself, so it is keyed by default: calls share an
// answer only with calls carrying the same values. Behind a proxy that
// sets the same values on every call the key, and so sharing, is unchanged;
// a client address that differs per end user splits it per address (unlike
// the HTTP engine, which leaves addresses out because a response can name
// them in Vary; a gRPC answer cannot). WithUnkeyedForwarding ignores it.
var forwardingMetadata = []string{
	"forwarded",                // RFC 7239
	"front-end-https",          // scheme, set by Microsoft proxies
	"true-client-ip",           // client address (Akamai, Cloudflare)
	"x-envoy-external-address", // Envoy: the client address it trusts
	"x-envoy-original-path",    // Envoy: the path before a rewrite
	"x-forwarded-for",          // client address and the proxies passed
	"x-forwarded-host",
	"x-forwarded-port",
	"x-forwarded-prefix",
	"x-forwarded-proto",
	"x-forwarded-protocol",
	"x-forwarded-scheme",
	"x-forwarded-server",
	"x-forwarded-ssl",
	"x-forwarded-uri",
	"x-host",
	"x-original-host",
	"x-original-uri",
	"x-original-url",
	"x-real-ip", // client address (nginx)
	"x-scheme",
	"x-url-scheme",
}

// identityMetadata says who calls: a mesh's proxy sets it from the
// caller's certificate or workload. It is keyed by default, and
// WithUnkeyedForwarding leaves it keyed: each caller identity gets answers
// of its own, made for a call carrying the same identity. A method whose
// answer does not depend on the caller may ignore it by name
// (WithIgnoredMetadata("x-forwarded-client-cert")).
var identityMetadata = []string{
	"x-forwarded-client-cert",            // Envoy, Istio: the client certificate (URI=spiffe://...)
	"x-envoy-peer-metadata",              // Istio: the calling workload's metadata
	"x-envoy-peer-metadata-id",           // Istio: the calling workload's id
	"x-envoy-internal",                   // Envoy: the call comes from inside the trust boundary
	"x-envoy-downstream-service-cluster", // Envoy: the calling service
	"x-envoy-downstream-service-node",    // Envoy: the calling node
}

// authorityMetadata is the name the client dialled (or a call's
// grpc.CallAuthority): a server that serves several names may answer by it
// (virtual hosting, one tenant per name), as an HTTP server answers by
// Host. It is keyed by default, also with WithUnkeyedForwarding, as the
// HTTP engine keys Host; a server whose answers do not depend on the name
// may ignore it (WithIgnoredMetadata(":authority")) so that clients
// dialling it by different names share one answer.
const authorityMetadata = ":authority"

// defaultRules holds the rules of the exact names above; forwarding
// entries are mdDefault here, options may turn them to mdIgnore.
var defaultRules = func() map[string]mdRule {
	m := map[string]mdRule{authorityMetadata: mdDefault}
	for _, k := range ignoredNames {
		m[k] = mdIgnore
	}
	for _, k := range forwardingMetadata {
		m[k] = mdDefault
	}
	for _, k := range identityMetadata {
		m[k] = mdDefault
	}
	return m
}()

// rule returns what the key does with the entry k. Most specific first:
// the keys named in options, the prefixes declared ignorable, the
// defaults, then "*".
func (o *options) rule(k string) mdRule {
	if r, ok := o.rules[k]; ok {
		return r
	}
	for _, p := range o.ignoredPrefixes {
		if strings.HasPrefix(k, p) {
			return mdIgnore
		}
	}
	if r, ok := defaultRules[k]; ok {
		if r == mdDefault && o.unkeyedForwarding && slices.Contains(forwardingMetadata, k) {
			return mdIgnore
		}
		return r
	}
	for _, p := range ignoredPrefixes {
		if strings.HasPrefix(k, p) {
			return mdIgnore
		}
	}
	if o.ignoreAll {
		return mdIgnore
	}
	return mdBypass
}

// scan sorts the entries of md: the names of those keyed by default
// (sorted), or, if the call must not be shared, the first by name of the
// entries neither keyed nor ignorable. A handler may read such an entry
// (a tenant, a locale), so by default a call carrying one is not shared.
func (o *options) scan(md metadata.MD) (present []string, unkeyed string) {
	for k := range md {
		switch o.rule(k) {
		case mdDefault:
			present = append(present, k)
		case mdBypass:
			if unkeyed == "" || k < unkeyed {
				unkeyed = k
			}
		}
	}
	if unkeyed != "" {
		return nil, unkeyed
	}
	slices.Sort(present)
	return present, ""
}
