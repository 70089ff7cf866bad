package httpcache

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// keyVersion follows the URL's hash tag in every derived key; bump it when
// the derivation changes, so old entries are never read under new rules.
// h5: the URL's hash tag names the URL as the origin sees it (the host in
// lower case without its default port, the path with its percent-encodings
// normalised, the query canonical, whatever the target's form), so that one
// invalidation reaches every spelling of it; h4 tagged the path as sent, h3
// the request target as sent.
const keyVersion = "h5:"

// userKeyPrefix prefixes keys made by a custom key func, so they never meet
// a derived key.
const userKeyPrefix = "hu:"

// defaultKey returns the guard key of r with the default rules: the scheme,
// Host, method (HEAD counts as GET), request target, canonical query, the
// values of headers (canonical names, sorted, no duplicates) and of the
// forwarding headers ([ForwardingHeaders]), each length-prefixed, hashed
// with SHA-256, under the hash tag of r's URL (see urlTag).
func defaultKey(r *http.Request, headers []string) string {
	return deriveKey(r, r.Host, headers, true)
}

// Key lengths: the URL tag (16 bytes of SHA-256, base64) in braces, the
// version, then the whole input's SHA-256 in base64.
const (
	tagLen = 22
	keyLen = 1 + tagLen + 1 + len(keyVersion) + 43
)

// deriveKey is defaultKey with the host keyed (r.Host, or Config.KeyHost)
// and the forwarding headers keyed or not.
func deriveKey(r *http.Request, host string, headers []string, forwarding bool) string {
	var stack [512]byte
	var out [keyLen]byte
	out[0], out[1+tagLen] = '{', '}'
	u := appendURLInput(stack[:0], r.TLS != nil, host, r.URL)
	usum := sha256.Sum256(u)
	base64.RawURLEncoding.Encode(out[1:1+tagLen], usum[:16])
	b := appendKeyInput(stack[:0], r, host, headers, forwarding)
	sum := sha256.Sum256(b)
	copy(out[2+tagLen:], keyVersion)
	base64.RawURLEncoding.Encode(out[2+tagLen+len(keyVersion):], sum[:])
	return string(out[:])
}

// urlTag is the hash tag every key of one URL carries (its variants by
// KeyHeaders, forwarding headers and Vary included, and the keys of its
// other spellings: absolute-form targets, the Host in other cases or with
// its default port, the path's percent-encodings in other forms), so that an unsafe request drops them all at once
// (guard.Group.InvalidateTag): 16 bytes of the SHA-256 of appendURLInput,
// base64.
func urlTag(tls bool, host string, u *url.URL) string {
	var stack [512]byte
	sum := sha256.Sum256(appendURLInput(stack[:0], tls, host, u))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// appendURLInput appends what names a URL as the origin sees it,
// unambiguously: the scheme, the host (lower case, without the scheme's
// default port), the path as sent with its percent-encodings normalised
// (normPath) and the canonical query. The other parts
// of an absolute-form target are left out: such a request names the same
// resource as its origin-form twin (RFC 9110 §7.1), which the full key
// still tells apart (a handler may read them).
func appendURLInput(b []byte, tls bool, host string, u *url.URL) []byte {
	b = append(b, 5) // input format version
	scheme := "http"
	if tls {
		scheme = "https"
	}
	b = appendStr(b, scheme)
	b = appendStr(b, canonicalHost(scheme, host))
	b = appendStr(b, u.Opaque)
	b = appendStr(b, normPath(rawPath(u)))
	return appendQuery(b, u.RawQuery)
}

// normPath returns the escaped path p with its percent-encodings
// normalised as RFC 3986 §6.2.2 has it: an unreserved character (a letter,
// a digit, "-", ".", "_", "~") decoded, any other in upper-case hex. So
// "/%75sers" and "/users", "/caf%c3%a9" and "/caf%C3%A9" are one path, as
// the handler reads them; "/a%2Fb" stays apart from "/a/b". Without a '%',
// p itself (no copy).
func normPath(p string) string {
	i := strings.IndexByte(p, '%')
	if i < 0 {
		return p
	}
	b := make([]byte, 0, len(p))
	b = append(b, p[:i]...)
	for ; i < len(p); i++ {
		c := p[i]
		if c != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			b = append(b, c)
			continue
		}
		d := unhex(p[i+1])<<4 | unhex(p[i+2])
		if isUnreserved(d) {
			b = append(b, d)
		} else {
			b = append(b, '%', upperHex(p[i+1]), upperHex(p[i+2]))
		}
		i += 2
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// isUnreserved reports whether c is unreserved in a URI (RFC 3986 §2.3).
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// canonicalHost is host in lower case, without scheme's default port.
func canonicalHost(scheme, host string) string {
	switch {
	case scheme == "http" && strings.HasSuffix(host, ":80"):
		host = host[:len(host)-3]
	case scheme == "https" && strings.HasSuffix(host, ":443"):
		host = host[:len(host)-4]
	}
	return strings.ToLower(host) // no copy when already lower case
}

// appendKeyInput appends the unambiguous encoding hashed by defaultKey:
// every string is preceded by its length and every list by its count, so
// two different requests never encode alike.
//
// What it merges is what net/http, echo and gin hand a handler alike: the
// order of distinct query parameters and the escaping of a query the
// frameworks decode the same way. Everything else is kept as sent: the
// Host (routers match it case-sensitively), the path in its escaped form
// (a handler may read RawPath; echo routes on it), and the scheme, host
// and user of an absolute-form target (echo's Context.Scheme reads
// r.URL.Scheme).
func appendKeyInput(b []byte, r *http.Request, host string, headers []string, forwarding bool) []byte {
	b = append(b, 2) // input format version
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	b = appendStr(b, scheme)
	b = appendStr(b, host)
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	b = appendStr(b, method)
	b = appendTarget(b, r.URL)
	b = appendQuery(b, r.URL.RawQuery)
	b = binary.AppendUvarint(b, uint64(len(headers)))
	for _, name := range headers {
		b = appendValues(b, name, r.Header[name])
	}
	if forwarding {
		b = appendForwarding(b, r.Header)
	} else {
		b = append(b, 0)
	}
	return b
}

// appendTarget appends the parts of the request target other than the
// query: the absolute-form parts (empty for the usual origin-form) and the
// path as sent.
func appendTarget(b []byte, u *url.URL) []byte {
	b = appendStr(b, u.Scheme)
	b = appendStr(b, u.Opaque)
	if u.User != nil {
		b = append(b, 1)
		b = appendStr(b, u.User.String())
	} else {
		b = append(b, 0)
	}
	b = appendStr(b, u.Host)
	return appendStr(b, rawPath(u))
}

// rawPath is the path as the client escaped it: RawPath when set and
// still the escaping of Path (even one EscapedPath would discard as
// invalid, so "/a{b" and "/a%7Bb" stay apart), else the path's default
// escaping, which is then what was sent. A RawPath left behind by a
// middleware that rewrote Path alone is not used.
func rawPath(u *url.URL) string {
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err == nil && p == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

func appendValues(b []byte, name string, vals []string) []byte {
	b = appendStr(b, name)
	b = binary.AppendUvarint(b, uint64(len(vals)))
	for _, v := range vals {
		b = appendStr(b, v)
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// queryPair is one decoded name=value of a query. raw marks a pair kept
// verbatim, tagged so it never matches a decoded pair: one whose escapes
// do not decode, or that holds a ';' (Go's url.ParseQuery drops it, so
// "a=1;b" and "a=1%3Bb" reach a handler differently).
type queryPair struct {
	name, value string
	raw         bool
}

// canonicalQuery decodes raw into pairs sorted by name, appended to dst;
// the values of a repeated name keep their order, which applications may
// rely on (?tag=a&tag=b is a list). "a" and "a=" are the same pair, as every
// framework reads them alike.
func canonicalQuery(dst []queryPair, raw string) []queryPair {
	pairs := dst
	for seg := range strings.SplitSeq(raw, "&") {
		if seg == "" {
			continue
		}
		if strings.Contains(seg, ";") {
			pairs = append(pairs, queryPair{name: seg, raw: true})
			continue
		}
		name, value, _ := strings.Cut(seg, "=")
		n, err1 := url.QueryUnescape(name)
		v, err2 := url.QueryUnescape(value)
		if err1 != nil || err2 != nil {
			pairs = append(pairs, queryPair{name: seg, raw: true})
			continue
		}
		pairs = append(pairs, queryPair{name: n, value: v})
	}
	// A stable sort. Short queries (most) take an insertion sort, which
	// keeps the pairs on the caller's stack; a long one, which anybody
	// can send, must not cost quadratic time.
	if len(pairs) > shortQuery {
		slices.SortStableFunc(pairs, pairCmp)
		return pairs
	}
	for i := 1; i < len(pairs); i++ {
		for j := i; j > 0 && pairCmp(pairs[j], pairs[j-1]) < 0; j-- {
			pairs[j], pairs[j-1] = pairs[j-1], pairs[j]
		}
	}
	return pairs
}

// shortQuery is the most pairs canonicalQuery sorts by insertion.
const shortQuery = 16

// pairCmp orders decoded pairs by name, raw pairs after them.
func pairCmp(a, b queryPair) int {
	if a.raw != b.raw {
		if a.raw {
			return 1
		}
		return -1
	}
	return strings.Compare(a.name, b.name)
}

func appendQuery(b []byte, raw string) []byte {
	var stack [shortQuery]queryPair
	pairs := canonicalQuery(stack[:0], raw)
	b = binary.AppendUvarint(b, uint64(len(pairs)))
	for _, p := range pairs {
		if p.raw {
			b = append(b, 'r')
		} else {
			b = append(b, 'q')
		}
		b = appendStr(b, p.name)
		b = appendStr(b, p.value)
	}
	return b
}

// canonicalHeaders returns names in canonical form, sorted, without
// duplicates or empty names.
func canonicalHeaders(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, http.CanonicalHeaderKey(n))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
