package httpcache

import (
	"net/http"
	"slices"
	"strings"
)

// Why a request is not served through the guard; "" when it is.
func (e *engine) bypass(r *http.Request) string {
	h := r.Header
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return "method"
	case r.ContentLength > 0 || len(r.TransferEncoding) > 0:
		return "request body"
	case len(h["Authorization"]) > 0 || len(h["Cookie"]) > 0:
		return "credentials"
	case hasMethodOverride(h):
		return "method override"
	case len(h["Upgrade"]) > 0 || headerHasToken(h["Connection"], "upgrade"):
		return "upgrade"
	case connectionOptions(h["Connection"]):
		return "connection options"
	case headerContains(h["Accept"], "text/event-stream"):
		return "event stream"
	case e.honorClient && clientNoCache(h):
		return "client no-cache"
	case underscoreName(h):
		return "underscore in a field name"
	}
	return ""
}

// underscoreName reports a request field whose name holds "_". To Go,
// X_Forwarded_Host is not X-Forwarded-Host, so the key would not hold it
// nor a proxy in the handler drop it; but CGI, WSGI, Rack and PHP servers
// name both HTTP_X_FORWARDED_HOST, and an upstream of theirs would answer
// by it: one request could choose the links, or the variant
// (Accept_Language), every later client is served. nginx drops such
// fields by default for this reason; here such a request is not shared.
func underscoreName(h http.Header) bool {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			return true
		}
	}
	return false
}

// connectionOptions reports a Connection field that names anything but
// close and keep-alive: fields of this hop (RFC 9110 §7.6.1), which a
// proxy in the handler (httputil.ReverseProxy, the stampede proxy) drops
// before it asks the origin. The key and the variants would still hold
// them: "Accept: application/json" with "Connection: Accept" would store
// the origin's answer to no Accept as the JSON variant, for everyone.
func connectionOptions(vals []string) bool {
	for _, v := range vals {
		for f := range strings.SplitSeq(v, ",") {
			switch f = strings.TrimSpace(f); {
			case f == "", strings.EqualFold(f, "close"), strings.EqualFold(f, "keep-alive"):
			default:
				return true
			}
		}
	}
	return false
}

// clientNoCache reports a request that asks for the origin's answer:
// no-cache, no-store, max-age=0 (a reload, RFC 9111 §5.2.1.1) or, without
// Cache-Control, Pragma: no-cache (§5.4).
func clientNoCache(h http.Header) bool {
	cc := parseCacheControl(h["Cache-Control"])
	return cc.noCache || cc.noStore || cc.maxAge == 0 || (len(h["Cache-Control"]) == 0 && headerHasToken(h["Pragma"], "no-cache"))
}

// shareable reports whether a response with this status and header may be
// stored and served to other clients.
//
// A status outside Config.Statuses is shared only where the response's own
// windows rule (UpstreamWindows) and it states its freshness explicitly:
// the origin itself marked it storable (RFC 9111 §3), a 5xx included; it
// is never inferred. A partial response (206) is never stored, nor is a
// 304 (a revalidation merges it).
func (e *engine) shareable(status int, h http.Header) bool {
	if status < 200 || status > 599 || status == http.StatusPartialContent || status == http.StatusNotModified {
		return false
	}
	cc, targeted := e.responseCC(h)
	if !e.statuses[status] && !(e.upstream && explicitFreshness(cc, targeted, h)) {
		return false
	}
	if len(h["Set-Cookie"]) > 0 && !e.storeCookies {
		return false
	}
	if cc.private || cc.noStore {
		return false
	}
	if cc.noCache && !e.upstream && !e.strict {
		// Stored only where the response's own windows rule, which make
		// it revalidated before each use.
		return false
	}
	// A Vary on headers the key does not hold selects a variant
	// (vary.go); Vary: * matches no later request.
	if _, star := e.varyNames(h); star {
		return false
	}
	return !headerContains(h["Content-Type"], "text/event-stream")
}

// keyed reports whether the key holds the whole value of the request
// header name, so that a response may vary on it. Forwarded is keyed
// without its for= pairs: a response varying on it is not shared unless
// KeyHeaders lists it.
func (e *engine) keyed(name string) bool {
	if slices.Contains(e.keyHeaders, name) {
		return true
	}
	return e.forwarding && name != "Forwarded" && slices.Contains(forwardingHeaders, name)
}

func headerContains(vals []string, sub string) bool {
	for _, v := range vals {
		if strings.Contains(strings.ToLower(v), sub) {
			return true
		}
	}
	return false
}

func headerHasToken(vals []string, token string) bool {
	for _, v := range vals {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}
