package guardgrpc

import (
	"context"
	"fmt"
	"log/slog"
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
	methods           map[string]bool
	metadata          []string // lower-cased, sorted, unique
	keyFunc           KeyFunc
	negativeNotFound  bool
	allowAuth         bool
	ignored           []string // lower-cased keys
	ignoredPrefixes   []string
	ignoreAll         bool
	unkeyedForwarding bool
	rules             map[string]mdRule // the keys named above, by check
	bypassHook        func(context.Context, BypassInfo)
	unmatchedHook     func(context.Context, UnmatchedMethod)
	logger            *slog.Logger
	callOpts          []guard.CallOption
}

var defaultOptions = options{
	methods: map[string]bool{},
}

// evaluateOptions applies opts to the defaults, then checks what no single
// option can check alone. It panics on misuse (see the package doc).
func evaluateOptions(opts []Option) *options {
	o := defaultOptions
	o.methods = map[string]bool{}
	// A call that waited WaitTimeout for another call's run answers
	// Unavailable rather than running the handler too: a slow or failing
	// handler never sees one run per server at once.
	o.callOpts = []guard.CallOption{guard.WithWaitTimeoutPolicy(guard.ReturnError)}
	for i, f := range opts {
		if f == nil {
			misuse("nil Option (option %d)", i+1)
		}
		f(&o)
	}
	o.check()
	return &o
}

// check rejects options that contradict each other or would have no
// effect, and settles the rules of the metadata keys they name.
func (o *options) check() {
	for _, k := range o.metadata {
		if slices.Contains(o.ignored, k) {
			misuse("metadata key %q both keyed (WithMetadata) and ignored (WithIgnoredMetadata)", k)
		}
	}
	if !o.allowAuth && slices.Contains(o.metadata, "authorization") {
		misuse(`WithMetadata("authorization") without WithAllowAuthorization: calls carrying it bypass the cache`)
	}
	if o.keyFunc != nil && (len(o.metadata) > 0 || len(o.ignored) > 0 || len(o.ignoredPrefixes) > 0 || o.ignoreAll || o.unkeyedForwarding) {
		misuse("WithKeyFunc replaces the default key: WithMetadata, WithIgnoredMetadata and WithUnkeyedForwarding would have no effect")
	}
	o.rules = map[string]mdRule{}
	if o.allowAuth {
		o.rules["authorization"] = mdIgnore
	}
	for _, k := range o.ignored {
		o.rules[k] = mdIgnore
	}
	for _, k := range o.metadata {
		o.rules[k] = mdKeyed
	}
}

// misuse reports a programmer error: the package panics, when the
// interceptor (or the option) is built, with a message naming it.
func misuse(format string, args ...any) {
	panic("guardgrpc: " + fmt.Sprintf(format, args...))
}

// WithMethods lists the full method names ("/pkg.Service/Method") whose OK
// answers are cached. Other methods pass through untouched. With no method
// listed nothing is cached: a method is cached only once someone has
// decided its answer depends on the request (and the metadata of
// WithMetadata) alone. It panics on a name that is not a full method name
// (a leading "/", the service, "/", the method): such a name would match
// no call.
func WithMethods(fullMethods ...string) Option {
	for _, m := range fullMethods {
		if !isFullMethod(m) {
			misuse(`WithMethods(%q): not a full method name; want "/package.Service/Method"`, m)
		}
	}
	return func(o *options) {
		for _, m := range fullMethods {
			o.methods[m] = true
		}
	}
}

// isFullMethod reports whether m is "/" service "/" method, both parts
// non-empty, in printable ASCII without spaces (the form grpc-go gives a
// call's FullMethod; services registered from a hand-written
// grpc.ServiceDesc may name themselves without a package).
func isFullMethod(m string) bool {
	svc, name, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	if !strings.HasPrefix(m, "/") || !ok || svc == "" || name == "" || strings.Contains(name, "/") {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] <= ' ' || m[i] > '~' {
			return false
		}
	}
	return true
}

// metadataKey returns k lower-cased, or panics naming the option if it is
// not a metadata key: [0-9a-z-_.] after lower-casing, or ":" and a
// pseudo-header's name.
func metadataKey(option, k string) string {
	k = strings.ToLower(k)
	valid := k != ""
	rest := k
	if strings.HasPrefix(k, ":") {
		rest = k[1:]
		valid = rest != ""
	}
	for i := 0; valid && i < len(rest); i++ {
		c := rest[i]
		valid = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || (c == '-' || c == '_' || c == '.') && k[0] != ':'
	}
	if !valid {
		misuse("%s(%q): not a metadata key; want [0-9a-z-_.], in any case", option, k)
	}
	return k
}

// WithMetadata adds the values of these metadata keys to the cache key, for
// methods whose answer depends on them (a tenant, a locale). Keys are
// matched case-insensitively, as gRPC lower-cases them. A key listed here
// is keyed even if it is ignorable by default ("baggage", for an answer
// read from it). A call carrying metadata that is neither keyed nor
// ignorable (WithIgnoredMetadata, the defaults) is not cached: see the
// package doc. It panics on
// a key that is not a metadata key ([0-9a-z-_.] in any case, or a
// pseudo-header such as ":authority"); the interceptor's constructor
// panics on a key also ignored, or on "authorization" without
// WithAllowAuthorization (such calls never use the cache).
func WithMetadata(keys ...string) Option {
	keys = slices.Clone(keys)
	for i, k := range keys {
		keys[i] = metadataKey("WithMetadata", k)
	}
	return func(o *options) {
		for _, k := range keys {
			if !slices.Contains(o.metadata, k) {
				o.metadata = append(o.metadata, k)
			}
		}
		slices.Sort(o.metadata)
	}
}

// WithIgnoredMetadata declares metadata keys the answers do not depend on
// (an application's own correlation id, say): calls carrying them are
// cached, and calls differing only there share one answer. Keys are
// matched case-insensitively; a key ending in "-" or "*" is a prefix
// ("x-acme-*" covers x-acme-session, x-acme-span...). A key or prefix named
// here is ignored even if it is keyed by default (forwarding and identity
// metadata, see the package doc). "*" alone ignores every metadata entry
// that is neither listed with WithMetadata nor keyed by default: the
// handler must then read no other metadata.
//
// By default the metadata of gRPC itself, of tracing, of correlation and
// the bookkeeping Envoy adds to upstream calls are ignorable (the package
// doc lists them); forwarding and identity metadata are keyed. Any other
// entry sends the call past the cache, unless listed here or keyed with
// WithMetadata.
//
// It panics on a key that is not a metadata key, and on "authorization"
// (WithAllowAuthorization says that).
func WithIgnoredMetadata(keys ...string) Option {
	var (
		all      bool
		names    []string
		prefixes []string
	)
	for _, k := range keys {
		switch {
		case k == "*":
			all = true
		case strings.HasSuffix(k, "*"):
			prefixes = append(prefixes, metadataKey("WithIgnoredMetadata", strings.TrimSuffix(k, "*")))
		case k == "-":
			misuse(`WithIgnoredMetadata("-"): not a metadata key prefix; "*" ignores everything`)
		case strings.HasSuffix(k, "-"):
			prefixes = append(prefixes, metadataKey("WithIgnoredMetadata", k))
		default:
			k = metadataKey("WithIgnoredMetadata", k)
			if k == "authorization" {
				misuse(`WithIgnoredMetadata("authorization"): use WithAllowAuthorization`)
			}
			names = append(names, k)
		}
	}
	return func(o *options) {
		o.ignoreAll = o.ignoreAll || all
		o.ignored = append(o.ignored, names...)
		o.ignoredPrefixes = append(o.ignoredPrefixes, prefixes...)
	}
}

// WithUnkeyedForwarding leaves the forwarding metadata (x-forwarded-for,
// x-forwarded-host, x-forwarded-proto, forwarded, x-real-ip... listed in
// the package doc) out of the key, as ignorable: calls that differ only
// there share one answer. Use it when the handlers of the listed methods
// read none of it, behind a proxy that sets the client's address per end
// user (where keying it would share answers only between calls of one
// address). Identity metadata (x-forwarded-client-cert) stays keyed.
//
// The trade-off: a client can send forwarding metadata itself, so a
// handler that builds a link or picks a region from it would have its
// answer for one client's values served to every client.
func WithUnkeyedForwarding() Option {
	return func(o *options) { o.unkeyedForwarding = true }
}

// WithBypassHook calls f for every call of a method listed with
// WithMethods that goes past the cache, with the reason, so that an
// operator can count them and see protection turn off (a metadata entry
// a new proxy adds to every call, say). f runs on the call's goroutine
// before its handler (or, on the client, the server) answers it, so it
// must be quick. info names a metadata key, never its value. It panics on
// a nil f.
func WithBypassHook(f func(ctx context.Context, info BypassInfo)) Option {
	if f == nil {
		misuse("WithBypassHook(nil)")
	}
	return func(o *options) { o.bypassHook = f }
}

// WithUnmatchedHook calls f, once per method, when a method listed with
// WithMethods looks like a name no call will ever match: a call arrives
// for the same service and method in another package
// ("/catalog.v1.Catalog/GetProduct" for a listed
// "/catalog.Catalog/GetProduct"), or 1,000 calls of methods not listed
// went through while no call matched it. Nothing is cached for such a
// method. f runs on the goroutine of the call that revealed it, so it must
// be quick. CheckMethods finds such names before a server starts. It
// panics on a nil f.
func WithUnmatchedHook(f func(ctx context.Context, m UnmatchedMethod)) Option {
	if f == nil {
		misuse("WithUnmatchedHook(nil)")
	}
	return func(o *options) { o.unmatchedHook = f }
}

// WithLogger logs to l, at warn, what shows the interceptor misconfigured
// while it runs: a method listed with WithMethods that no call matches
// (once per method, as WithUnmatchedHook reports it), with its name, the
// method probably meant and the count of other calls. Like guard.LogHooks
// it logs no key and no request. It panics on a nil l.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		misuse("WithLogger(nil)")
	}
	return func(o *options) { o.logger = l }
}

// WithKeyFunc replaces the default key (see the package doc). It panics
// on a nil f; the interceptor's constructor panics if WithMetadata,
// WithIgnoredMetadata or WithUnkeyedForwarding is given too, as the
// KeyFunc alone decides.
func WithKeyFunc(f KeyFunc) Option {
	if f == nil {
		misuse("WithKeyFunc(nil)")
	}
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
// Default (and 0): the Group's FreshFor. It panics on a negative d, which
// guard would refuse on every call.
func WithFreshFor(d time.Duration) Option {
	if d < 0 {
		misuse("WithFreshFor(%v): negative; 0 keeps the Group's FreshFor", d)
	}
	return func(o *options) { o.callOpts = append(o.callOpts, guard.WithFreshFor(d)) }
}

// WithStaleFor sets how long after FreshFor an answer is still served while
// it is refreshed (guard.WithStaleFor). Default (and 0): the Group's
// StaleFor; guard.Disabled: no stale window. It panics on another negative
// d, which guard would refuse on every call.
func WithStaleFor(d time.Duration) Option {
	if d < 0 && d != guard.Disabled {
		misuse("WithStaleFor(%v): negative; guard.Disabled gives no stale window", d)
	}
	return func(o *options) { o.callOpts = append(o.callOpts, guard.WithStaleFor(d)) }
}
