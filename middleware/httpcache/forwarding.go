package httpcache

import (
	"encoding/binary"
	"net/http"
	"strings"
)

// forwardingHeaders are the request headers through which a proxy tells
// the application the host, scheme, port, prefix or URL the client asked
// for, and which applications (or their frameworks) read to build absolute
// links and redirects, or to route. A client can send any of them itself:
// unkeyed, one request carrying X-Forwarded-Host: evil.example would choose
// the links every later client is served. They are keyed by default, so a
// request carrying one is served only a response produced for the same
// value; behind a proxy that sets them to the same values on every request
// the key, and so the hit rate, is unchanged.
//
// Canonical names, sorted. The client's address (X-Forwarded-For,
// X-Real-Ip, the for= of Forwarded) is left out: it differs per client, so
// keying it would end sharing behind any proxy; a response that depends on
// it names it in Vary and is then not stored.
var forwardingHeaders = []string{
	"Forwarded",            // RFC 7239: host=, proto=, by= (for= left out, see forwardedKey)
	"Front-End-Https",      // scheme, set by Microsoft proxies
	"X-Forwarded-Host",     // host: gorilla/handlers.ProxyHeaders, most frameworks
	"X-Forwarded-Port",     // port of absolute links
	"X-Forwarded-Prefix",   // path prefix a proxy stripped (Traefik, Spring)
	"X-Forwarded-Proto",    // scheme: echo Context.Scheme, gorilla, gin users
	"X-Forwarded-Protocol", // scheme: echo Context.Scheme
	"X-Forwarded-Scheme",   // scheme: gorilla/handlers, nginx setups
	"X-Forwarded-Server",   // host name of the proxy (Apache mod_proxy)
	"X-Forwarded-Ssl",      // scheme ("on"): echo Context.Scheme
	"X-Forwarded-Uri",      // original URI (Traefik)
	"X-Host",               // host override read by some frameworks
	"X-Http-Host-Override", // host override
	"X-Original-Host",      // host before a rewrite
	"X-Original-Uri",       // URI before a rewrite (ingress-nginx)
	"X-Original-Url",       // URL before a rewrite (IIS, Symfony routing)
	"X-Rewrite-Url",        // URL before a rewrite (IIS, Symfony routing)
	"X-Scheme",             // scheme (ingress-nginx)
	"X-Url-Scheme",         // scheme: echo Context.Scheme
}

// methodOverrideHeaders ask an application to treat the request as another
// method. A GET or HEAD carrying one is not shared: it asks not to be a
// GET, and a handler that honours it must not have its answer stored.
var methodOverrideHeaders = []string{"X-Http-Method", "X-Http-Method-Override", "X-Method-Override"}

// ForwardingHeaders returns the forwarding and override headers keyed
// unless Config.UnkeyedForwarding, canonical names, sorted: the headers
// through which a proxy (or a client posing as one) names the host,
// scheme, port, prefix or URL asked for.
func ForwardingHeaders() []string { return append([]string(nil), forwardingHeaders...) }

// forwardingIndex maps each forwarding header to its place in the list.
var forwardingIndex = func() map[string]int {
	m := make(map[string]int, len(forwardingHeaders))
	for i, name := range forwardingHeaders {
		m[name] = i
	}
	return m
}()

// appendForwarding appends the forwarding headers h carries: their count,
// then each one's name and values, in the list's order; Forwarded without
// its plain for= pairs. It walks h, not the list: a request holds a few
// headers, and seldom one starting like a forwarding header.
func appendForwarding(b []byte, h http.Header) []byte {
	present, n := forwardingPresent(h)
	b = binary.AppendUvarint(b, uint64(n))
	for i := 0; n > 0 && i < len(forwardingHeaders); i++ {
		if !present[i] {
			continue
		}
		n--
		name := forwardingHeaders[i]
		if name == "Forwarded" {
			b = appendStr(b, name)
			b = appendForwarded(b, h[name])
			continue
		}
		b = appendValues(b, name, h[name])
	}
	return b
}

// forwardingPresent returns which forwarding headers h carries, by their
// place in the list, and how many.
func forwardingPresent(h http.Header) (present [32]bool, n int) {
	for name, vals := range h {
		if name == "" || (name[0] != 'X' && name[0] != 'F') || len(vals) == 0 {
			continue
		}
		if i, ok := forwardingIndex[name]; ok {
			present[i] = true
			n++
		}
	}
	return present, n
}

// appendForwarded appends the Forwarded field lines with the pairs that
// only name the client (for=<address>) taken out, keeping every other pair
// as sent and the elements apart. A line that does not parse (an
// unterminated quoted string) is kept whole. Each kept pair is 'a' and the
// pair, each element ends with 'e', each line with 'z': tokens that
// delimit themselves, so the encoding stays unambiguous without counts
// and the walk allocates nothing.
func appendForwarded(b []byte, vals []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(vals)))
	for _, v := range vals {
		if !quotesClosed(v) {
			b = append(b, 'r')
			b = appendStr(b, v)
			continue
		}
		b = append(b, 'p')
		start, quoted := 0, false
		for i := 0; i <= len(v); i++ {
			if i < len(v) {
				switch c := v[i]; {
				case quoted && c == '\\':
					i++
					continue
				case c == '"':
					quoted = !quoted
					continue
				case quoted || (c != ';' && c != ','):
					continue
				}
			}
			// A pair ends at i: at ';', ',' or the end of the line.
			if p := strings.TrimSpace(v[start:i]); !clientPair(p) {
				b = append(b, 'a')
				b = appendStr(b, p)
			}
			if i == len(v) || v[i] == ',' {
				b = append(b, 'e')
			}
			start = i + 1
		}
		b = append(b, 'z')
	}
	return b
}

// quotesClosed reports whether every quoted string of a Forwarded line
// (RFC 7239 §4: quoted-string, with backslash escapes) ends.
func quotesClosed(v string) bool {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch {
		case quoted && v[i] == '\\':
			i++
		case v[i] == '"':
			quoted = !quoted
		}
	}
	return !quoted
}

// clientPair reports whether p is for=<node>: a token or a quoted string of
// the characters of an address, port or obfuscated name only, so that any
// parser, quote-aware or not, reads it as one pair naming the client. A
// for= holding anything else (a quoted ';', say) stays in the key.
func clientPair(p string) bool {
	name, val, ok := strings.Cut(p, "=")
	if !ok || !strings.EqualFold(name, "for") {
		return false
	}
	if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
		val = val[1 : len(val)-1]
	}
	if val == "" {
		return false
	}
	for i := 0; i < len(val); i++ {
		c := val[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == ':' || c == '_' || c == '-' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// hasMethodOverride reports whether h asks for another method.
func hasMethodOverride(h http.Header) bool {
	for _, name := range methodOverrideHeaders {
		if len(h[name]) > 0 {
			return true
		}
	}
	return false
}
