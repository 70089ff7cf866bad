package guardgrpc

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/stampede-go/stampede/guard"
)

// Option configures UnaryServerInterceptor and UnaryClientInterceptor.
type Option func(*options)

// KeyFunc computes the guard key of a call, replacing the default key.
// ctx carries the call's incoming metadata (server) or outgoing metadata
// (client). ok false sends the call past the cache. The key is used as it
// is, so it must tell apart everything the answer depends on, the method
// included; calls with equal keys share one answer.
type KeyFunc func(ctx context.Context, fullMethod string, req proto.Message) (key string, ok bool)

type options struct {
	methods          map[string]bool
	metadata         []string // lower-cased, sorted, unique
	keyFunc          KeyFunc
	negativeNotFound bool
	allowAuth        bool
	ignored          []string // lower-cased keys
	ignoredPrefixes  []string
	ignoreAll        bool
	callOpts         []guard.CallOption
}

var defaultOptions = options{
	methods: map[string]bool{},
}

func evaluateOptions(opts []Option) *options {
	o := defaultOptions
	o.methods = map[string]bool{}
	for _, f := range opts {
		f(&o)
	}
	return &o
}

// WithMethods lists the full method names ("/pkg.Service/Method") whose OK
// answers are cached. Other methods pass through untouched. With no method
// listed nothing is cached: a method is cached only once someone has
// decided its answer depends on the request (and the metadata of
// WithMetadata) alone.
func WithMethods(fullMethods ...string) Option {
	return func(o *options) {
		for _, m := range fullMethods {
			o.methods[m] = true
		}
	}
}

// WithMetadata adds the values of these metadata keys to the cache key, for
// methods whose answer depends on them (a tenant, a locale). Keys are
// matched case-insensitively, as gRPC lower-cases them. A call carrying
// metadata that is neither listed here nor ignorable (transport metadata,
// WithIgnoredMetadata) is not cached: see the package doc.
func WithMetadata(keys ...string) Option {
	return func(o *options) {
		for _, k := range keys {
			k = strings.ToLower(k)
			if !slices.Contains(o.metadata, k) {
				o.metadata = append(o.metadata, k)
			}
		}
		slices.Sort(o.metadata)
	}
}

// WithIgnoredMetadata declares metadata keys the answers do not depend on
// (a request id, tracing headers other than W3C Trace Context): calls
// carrying them are cached, and calls differing only there share one
// answer. Keys are matched case-insensitively; a key ending in "-" or "*"
// is a prefix ("x-b3-*" covers x-b3-traceid, x-b3-spanid...). "*" alone
// ignores every metadata entry not listed with WithMetadata: the handler
// must then read no metadata but those.
//
// By default only transport metadata is ignorable: keys starting with ":"
// (":authority") or "grpc-", content-type, user-agent, te, traceparent and
// tracestate. Any other entry sends the call past the cache, unless listed
// here or keyed with WithMetadata.
func WithIgnoredMetadata(keys ...string) Option {
	return func(o *options) {
		for _, k := range keys {
			k = strings.ToLower(strings.TrimSpace(k))
			switch {
			case k == "*":
				o.ignoreAll = true
			case strings.HasSuffix(k, "*"):
				o.ignoredPrefixes = append(o.ignoredPrefixes, strings.TrimSuffix(k, "*"))
			case strings.HasSuffix(k, "-"):
				o.ignoredPrefixes = append(o.ignoredPrefixes, k)
			case k != "":
				o.ignored = append(o.ignored, k)
			}
		}
	}
}

// WithKeyFunc replaces the default key (see the package doc).
func WithKeyFunc(f KeyFunc) Option {
	return func(o *options) { o.keyFunc = f }
}

// WithNegativeNotFound caches codes.NotFound answers as guard.ErrNotFound,
// for guard.Options.NegativeFor: meanwhile every node answers NotFound from
// the cache without calling the handler. Other error codes are never
// cached. Callers served from the cache get a NotFound status with a
// generic message (the original message is not stored).
func WithNegativeNotFound() Option {
	return func(o *options) { o.negativeNotFound = true }
}

// WithAllowAuthorization lets calls carrying "authorization" metadata (or,
// on the client, a per-call credentials option) use the cache. By default
// they bypass it, so one user's answer is never served to another. Only
// allow it for methods whose answer does not depend on the caller (the
// key then ignores the token), or add "authorization" to WithMetadata to
// keep one entry per token.
func WithAllowAuthorization() Option {
	return func(o *options) { o.allowAuth = true }
}

// WithFreshFor sets how long a cached answer is fresh (guard.WithFreshFor).
// Default: the Group's FreshFor.
func WithFreshFor(d time.Duration) Option {
	return func(o *options) { o.callOpts = append(o.callOpts, guard.WithFreshFor(d)) }
}

// WithStaleFor sets how long after FreshFor an answer is still served while
// it is refreshed (guard.WithStaleFor). Default: the Group's StaleFor.
func WithStaleFor(d time.Duration) Option {
	return func(o *options) { o.callOpts = append(o.callOpts, guard.WithStaleFor(d)) }
}
