// Package cachestatus is the vocabulary of the Cache-Status field (RFC
// 9211) that stampede's middleware sends: the response header of the HTTP
// adapters (guardhttp, guardecho, guardgin) and the "cache-status"
// response metadata of the gRPC interceptors. Each value says how one
// request was answered; the cache is named "stampede", and a value never
// carries the key.
//
// Tests, dashboards and log pipelines compare a response's Cache-Status
// with these constants; an adapter of your own sends them, through Of for
// a guard answer.
package cachestatus

import "github.com/stampede-go/stampede/guard"

// The values sent.
const (
	// Hit: served from the cache, fresh.
	Hit = "stampede; hit"
	// Stale: served stale while one node refreshes it (RFC 9211 fwd=stale).
	Stale = "stampede; fwd=stale"
	// Stored: this request's own call of the origin answered it, and the
	// answer was stored.
	Stored = "stampede; fwd=miss; stored"
	// Collapsed: another request's call of the origin answered it (in this
	// process, or on another node woken by its fill).
	Collapsed = "stampede; fwd=miss; collapsed"
	// Degraded: Redis was unavailable; answered through this process's
	// singleflight alone.
	Degraded = "stampede; fwd=miss; detail=degraded"
	// Miss: the origin answered, nothing was stored.
	Miss = "stampede; fwd=miss"
	// Request: a stored response was found, but the request's own
	// directives (max-age, min-fresh) did not allow its use (RFC 9211
	// fwd=request).
	Request = "stampede; fwd=request"
	// Bypass: the request was not eligible for the cache.
	Bypass = "stampede; fwd=bypass"
	// Passed: the URL's responses were lately not shareable (hit-for-pass):
	// this request's own call of the origin answered it, with no wait.
	Passed = "stampede; fwd=miss; detail=pass"
)

// NotStored is the value for a response of the origin that answered its own
// request and was not stored, and why (a fixed phrase of the engine, sent
// as an RFC 8941 string; never a header value or a key).
func NotStored(why string) string {
	if why == "" {
		return Miss
	}
	b := make([]byte, 0, len(Miss)+len(why)+11)
	b = append(b, Miss...)
	b = append(b, `; detail="`...)
	for i := 0; i < len(why); i++ {
		if c := why[i]; c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// Of returns the value for a guard answer of status s.
func Of(s guard.Status) string {
	switch s {
	case guard.Hit:
		return Hit
	case guard.Stale:
		return Stale
	case guard.Miss:
		return Stored
	case guard.Shared:
		return Collapsed
	case guard.Degraded:
		return Degraded
	case guard.Passed:
		return Passed
	}
	return Miss
}
