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

// keyVersion prefixes every derived key; bump it when the derivation
// changes, so old entries are never read under new rules.
const keyVersion = "h1:"

// userKeyPrefix prefixes keys made by a custom key func, so they never meet
// a derived key.
const userKeyPrefix = "hu:"

// DeriveKey returns the guard key of r: the scheme, Host, method (HEAD
// counts as GET), escaped path, canonical query and the values of headers
// (canonical names, sorted, no duplicates), each length-prefixed, hashed
// with SHA-256.
func DeriveKey(r *http.Request, headers []string) string {
	var stack [512]byte
	b := appendKeyInput(stack[:0], r, headers)
	sum := sha256.Sum256(b)
	var out [len(keyVersion) + 43]byte
	copy(out[:], keyVersion)
	base64.RawURLEncoding.Encode(out[len(keyVersion):], sum[:])
	return string(out[:])
}

// appendKeyInput appends the unambiguous encoding hashed by DeriveKey:
// every string is preceded by its length and every list by its count, so
// two different requests never encode alike.
func appendKeyInput(b []byte, r *http.Request, headers []string) []byte {
	b = append(b, 1) // input format version
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	b = appendStr(b, scheme)
	b = appendLower(b, r.Host)
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	b = appendStr(b, method)
	b = appendStr(b, r.URL.EscapedPath())
	b = appendQuery(b, r.URL.RawQuery)
	b = binary.AppendUvarint(b, uint64(len(headers)))
	for _, name := range headers {
		vals := r.Header[name]
		b = appendStr(b, name)
		b = binary.AppendUvarint(b, uint64(len(vals)))
		for _, v := range vals {
			b = appendStr(b, v)
		}
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendLower(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// queryPair is one decoded name=value of a query. raw marks a pair whose
// escapes did not decode: it is kept verbatim, and tagged so it never
// matches a decoded pair.
type queryPair struct {
	name, value string
	raw         bool
}

// canonicalQuery decodes raw into pairs sorted by name; the values of a
// repeated name keep their order, which applications may rely on
// (?tag=a&tag=b is a list). "a" and "a=" are the same pair, as every
// framework reads them alike.
func canonicalQuery(raw string) []queryPair {
	if raw == "" {
		return nil
	}
	var pairs []queryPair
	for seg := range strings.SplitSeq(raw, "&") {
		if seg == "" {
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
	slices.SortStableFunc(pairs, func(a, b queryPair) int {
		if a.raw != b.raw {
			if a.raw {
				return 1
			}
			return -1
		}
		return strings.Compare(a.name, b.name)
	})
	return pairs
}

func appendQuery(b []byte, raw string) []byte {
	pairs := canonicalQuery(raw)
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
