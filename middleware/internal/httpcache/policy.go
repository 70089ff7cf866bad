package httpcache

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// Why a request is not served through the guard; "" when it is.
func (e *Engine) bypass(r *http.Request) string {
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
	case len(h["Range"]) > 0:
		return "range"
	case len(h["Upgrade"]) > 0 || headerHasToken(h["Connection"], "upgrade"):
		return "upgrade"
	case headerContains(h["Accept"], "text/event-stream"):
		return "event stream"
	case e.honorClient && clientNoCache(h):
		return "client no-cache"
	}
	return ""
}

func clientNoCache(h http.Header) bool {
	cc := parseCacheControl(h["Cache-Control"])
	return cc.noCache || cc.noStore || (len(h["Cache-Control"]) == 0 && headerHasToken(h["Pragma"], "no-cache"))
}

// shareable reports whether a response with this status and header may be
// stored and served to other clients.
func (e *Engine) shareable(status int, h http.Header) bool {
	if status < 200 || status > 599 || status >= 500 || status == http.StatusPartialContent || !e.statuses[status] {
		return false
	}
	if len(h["Set-Cookie"]) > 0 {
		return false
	}
	cc := parseCacheControl(h["Cache-Control"])
	if cc.private || cc.noStore || cc.noCache {
		return false
	}
	for _, v := range h["Vary"] {
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			// The key holds only the allow-listed headers, so a response
			// that varies on anything else would reach the wrong clients.
			if f == "*" || !e.keyed(http.CanonicalHeaderKey(f)) {
				return false
			}
		}
	}
	return !headerContains(h["Content-Type"], "text/event-stream")
}

// keyed reports whether the key holds the whole value of the request
// header name, so that a response may vary on it. Forwarded is keyed
// without its for= pairs: a response varying on it is not shared unless
// KeyHeaders lists it.
func (e *Engine) keyed(name string) bool {
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

// cacheControl holds the directives the engine acts on; durations are -1
// when absent.
type cacheControl struct {
	private, noStore, noCache bool
	maxAge, sMaxAge, swr, sie int64
}

func parseCacheControl(vals []string) cacheControl {
	cc := cacheControl{maxAge: -1, sMaxAge: -1, swr: -1, sie: -1}
	for _, v := range vals {
		for d := range strings.SplitSeq(v, ",") {
			name, arg, _ := strings.Cut(strings.TrimSpace(d), "=")
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "private":
				cc.private = true
			case "no-store":
				cc.noStore = true
			case "no-cache":
				cc.noCache = true
			case "max-age":
				cc.maxAge = seconds(arg, cc.maxAge)
			case "s-maxage":
				cc.sMaxAge = seconds(arg, cc.sMaxAge)
			case "stale-while-revalidate":
				cc.swr = seconds(arg, cc.swr)
			case "stale-if-error":
				cc.sie = seconds(arg, cc.sie)
			}
		}
	}
	return cc
}

// seconds parses a delta-seconds argument; a malformed one counts as 0 (RFC
// 9111 §1.2.2 says to treat it as stale), a repeated one keeps the first.
func seconds(arg string, prev int64) int64 {
	if prev >= 0 {
		return prev
	}
	n, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return min(n, 1<<31) // RFC 9111: at most 2^31
}

// windows are the fresh and stale windows an upstream response asks for.
type windows struct {
	fresh, stale time.Duration
	freshSet     bool // false: the guard's FreshFor applies
}

// upstreamWindows reads the windows of a shareable response: s-maxage over
// max-age, less any Age an upstream cache added; the stale window is the
// larger of stale-while-revalidate and stale-if-error (the guard has one
// window for both), 0 when neither is given. ok is false when the response
// has no directive at all. A fresh window of 0 means do not store.
func upstreamWindows(h http.Header) (w windows, ok bool) {
	cc := parseCacheControl(h["Cache-Control"])
	fresh := cc.maxAge
	if cc.sMaxAge >= 0 {
		fresh = cc.sMaxAge
	}
	if fresh < 0 && cc.swr < 0 && cc.sie < 0 {
		return windows{}, false
	}
	if fresh >= 0 {
		if age, err := strconv.ParseInt(h.Get("Age"), 10, 64); err == nil && age > 0 {
			fresh = max(fresh-age, 0)
		}
		w.fresh, w.freshSet = time.Duration(fresh)*time.Second, true
	}
	w.stale = time.Duration(max(cc.swr, cc.sie, 0)) * time.Second
	return w, true
}

// guardWindows are w as the guard takes them: an unset fresh window keeps
// the Group's; a response that names no stale window gets none.
func (w windows) guardWindows() guard.Windows {
	gw := guard.Windows{Fresh: w.fresh, Stale: w.stale}
	if !w.freshSet {
		gw.Fresh = 0
	}
	if gw.Stale == 0 {
		gw.Stale = guard.Disabled
	}
	return gw
}
