package httpcache

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// cacheControl holds the Cache-Control directives the engine acts on, of a
// request or of a response; durations are -1 when absent.
type cacheControl struct {
	private, noStore, noCache, public bool
	mustRevalidate, proxyRevalidate   bool
	onlyIfCached                      bool
	maxAge, sMaxAge, swr, sie         int64
	maxStale, minFresh                int64
}

// maxDelta is the largest delta-seconds the engine uses: RFC 9111 §1.2.2
// lets a cache treat anything larger as 2^31.
const maxDelta = 1 << 31

func parseCacheControl(vals []string) cacheControl {
	cc := cacheControl{maxAge: -1, sMaxAge: -1, swr: -1, sie: -1, maxStale: -1, minFresh: -1}
	for _, v := range vals {
		for d := range strings.SplitSeq(v, ",") {
			name, arg, hasArg := strings.Cut(strings.TrimSpace(d), "=")
			arg = strings.Trim(strings.TrimSpace(arg), `"`)
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "private":
				// The qualified form (private="Set-Cookie") is treated
				// as the unqualified one: never shared.
				cc.private = true
			case "public":
				cc.public = true
			case "no-store":
				cc.noStore = true
			case "no-cache":
				// Qualified or not: the stored response is revalidated
				// before each use (RFC 9111 §5.2.2.4 allows that reading).
				cc.noCache = true
			case "must-revalidate":
				cc.mustRevalidate = true
			case "proxy-revalidate":
				cc.proxyRevalidate = true
			case "only-if-cached":
				cc.onlyIfCached = true
			case "max-age":
				cc.maxAge = seconds(arg, cc.maxAge)
			case "s-maxage":
				cc.sMaxAge = seconds(arg, cc.sMaxAge)
			case "stale-while-revalidate":
				cc.swr = seconds(arg, cc.swr)
			case "stale-if-error":
				cc.sie = seconds(arg, cc.sie)
			case "max-stale":
				if !hasArg {
					cc.maxStale = maxDelta // any staleness
				} else {
					cc.maxStale = seconds(arg, cc.maxStale)
				}
			case "min-fresh":
				cc.minFresh = seconds(arg, cc.minFresh)
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
		if isDigits(arg) {
			return maxDelta // too large for an int64: still a valid delta
		}
		return 0
	}
	return min(n, maxDelta)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ageValue parses an Age field (RFC 9111 §5.1): the first member of a list,
// a non-negative integer capped at 2^31; ok is false when absent or invalid
// (then it is ignored).
func ageValue(vals []string) (secs int64, ok bool) {
	if len(vals) == 0 {
		return 0, false
	}
	first, _, _ := strings.Cut(vals[0], ",")
	first = strings.TrimSpace(first)
	if !isDigits(first) {
		return 0, false
	}
	n, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return maxDelta, true
	}
	return min(n, maxDelta), true
}

// httpDate parses an HTTP-date (RFC 9110 §5.6.7) in any of its three
// forms, by the grammar: net/http's ParseTime alone also takes runs of
// spaces and one-digit hours, which the grammar does not (and an Expires
// that is not a valid date means the response is already expired).
func httpDate(vals []string) (time.Time, bool) {
	if len(vals) != 1 {
		return time.Time{}, false
	}
	v := strings.Trim(vals[0], " \t")
	if !dateForm(v) {
		return time.Time{}, false
	}
	t, err := http.ParseTime(v)
	return t, err == nil
}

// dateForm reports whether v has the exact shape of IMF-fixdate ("Sun, 06
// Nov 1994 08:49:37 GMT"), rfc850-date ("Sunday, 06-Nov-94 08:49:37 GMT")
// or asctime-date ("Sun Nov  6 08:49:37 1994"): digits where digits go,
// single spaces, "GMT" as is. Names are checked by ParseTime.
func dateForm(v string) bool {
	var shape string
	switch {
	case len(v) == 29 && v[3] == ',':
		shape = "aaa, dd aaa dddd dd:dd:dd GMT"
	case len(v) == 24 && v[3] == ' ':
		shape = "aaa aaa ?d dd:dd:dd dddd"
	default:
		comma := strings.IndexByte(v, ',')
		if comma < 6 || comma > 9 {
			return false
		}
		shape = strings.Repeat("a", comma) + ", dd-aaa-dd dd:dd:dd GMT"
	}
	if len(v) != len(shape) {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch shape[i] {
		case 'a':
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
				return false
			}
		case 'd':
			if c < '0' || c > '9' {
				return false
			}
		case '?':
			if c != ' ' && (c < '0' || c > '9') {
				return false
			}
		default:
			if c != shape[i] {
				return false
			}
		}
	}
	return true
}

// freshness is what a response says of its own freshness (RFC 9111 §4.2),
// as received by the engine.
type freshness struct {
	explicit   bool          // s-maxage, max-age or Expires
	lifetime   time.Duration // freshness lifetime (§4.2.1), when explicit
	initialAge time.Duration // corrected_initial_age (§4.2.3)
	serveStale time.Duration // stale-while-revalidate, stale-if-error (RFC 5861)
	swrSet     bool          // either of them was given
	// noServeStale: must-revalidate, proxy-revalidate or s-maxage (a
	// shared cache reads it as proxy-revalidate, §5.2.2.10): never served
	// stale without revalidation.
	noServeStale bool
	noCache      bool // revalidated before each use (§5.2.2.4)
	validator    bool // ETag or Last-Modified: revalidation is possible
	// heuristic: the lifetime §4.2.2 allows from Last-Modified, 0 without
	// one; used only where Config.HeuristicFreshness allows.
	heuristic time.Duration
	status    int
}

// responseCC returns the directives that rule this cache's use of a
// response with fields h: those of the first field of the target list
// (RFC 9213: CDN-Cache-Control...) with a valid, non-empty value, and then
// targeted is true (Cache-Control and Expires are then ignored); else
// Cache-Control's.
func (e *engine) responseCC(h http.Header) (cc cacheControl, targeted bool) {
	for _, name := range e.targets {
		if vals := h[name]; len(vals) > 0 {
			if cc, ok := parseTargeted(vals); ok {
				return cc, true
			}
		}
	}
	return parseCacheControl(h["Cache-Control"]), false
}

// parseTargeted parses a targeted field (RFC 9213 §2.1: a Structured
// Fields dictionary with Cache-Control's directives); ok is false for an
// empty or invalid one, which does not count.
func parseTargeted(vals []string) (cacheControl, bool) {
	joined := strings.TrimSpace(strings.Join(vals, ","))
	if joined == "" {
		return cacheControl{}, false
	}
	for d := range strings.SplitSeq(joined, ",") {
		member, _, _ := strings.Cut(strings.Trim(d, " \t"), ";") // parameters are ignored
		name, arg, hasArg := strings.Cut(member, "=")
		if !validKey(name) || (hasArg && !validItem(name, arg)) {
			return cacheControl{}, false
		}
	}
	return parseCacheControl(vals), true
}

// deltaDirectives take an integer (RFC 9213 §2.1: their values are
// Structured Fields integers, not strings).
var deltaDirectives = map[string]bool{"max-age": true, "s-maxage": true,
	"stale-while-revalidate": true, "stale-if-error": true}

// validItem reports whether arg is a bare item the directive name may
// take: an sf-integer for a delta directive, else any token-like or
// quoted item, with no whitespace before it.
func validItem(name, arg string) bool {
	if arg == "" || arg[0] == ' ' || arg[0] == '\t' {
		return false
	}
	if deltaDirectives[name] {
		digits := strings.TrimPrefix(arg, "-")
		return digits != "" && len(digits) <= 15 && isDigits(digits)
	}
	return true
}

// validKey reports an RFC 8941 key: lowercase letter or '*', then
// lowercase letters, digits, '_', '-', '.', '*'.
func validKey(k string) bool {
	if k == "" || !(k[0] == '*' || 'a' <= k[0] && k[0] <= 'z') {
		return false
	}
	for i := 1; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			return false
		}
	}
	return true
}

// explicitFreshness reports a response that states its freshness: cc's
// s-maxage or max-age, or (cc not targeted) an Expires field.
func explicitFreshness(cc cacheControl, targeted bool, h http.Header) bool {
	return cc.sMaxAge >= 0 || cc.maxAge >= 0 || (!targeted && len(h["Expires"]) > 0)
}

// heuristicStatus holds RFC 9110 §15.1's heuristically cacheable statuses.
var heuristicStatus = map[int]bool{200: true, 203: true, 204: true, 206: true, 300: true, 301: true,
	308: true, 404: true, 405: true, 410: true, 414: true, 501: true}

// Heuristic freshness (RFC 9111 §4.2.2): a fraction of the time since
// Last-Modified, at most a day.
const (
	heuristicFraction = 10
	heuristicMax      = 24 * time.Hour
)

// responseFreshness reads h, whose ruling directives are cc (responseCC),
// received at respTime for a request sent at reqTime.
func responseFreshness(h http.Header, cc cacheControl, targeted bool, reqTime, respTime time.Time) freshness {
	f := freshness{
		noServeStale: cc.mustRevalidate || cc.proxyRevalidate || cc.sMaxAge >= 0,
		noCache:      cc.noCache,
		validator:    len(h["Etag"]) > 0 || len(h["Last-Modified"]) > 0,
	}
	date, dateOK := httpDate(h["Date"])
	if !dateOK {
		date = respTime // §6.6.1 of RFC 9110: a recipient supplies it
	}
	switch {
	case cc.sMaxAge >= 0:
		f.explicit, f.lifetime = true, time.Duration(cc.sMaxAge)*time.Second
	case cc.maxAge >= 0:
		f.explicit, f.lifetime = true, time.Duration(cc.maxAge)*time.Second
	case !targeted && len(h["Expires"]) > 0:
		// An invalid date, "0" above all, is in the past (§5.3).
		f.explicit = true
		if exp, ok := httpDate(h["Expires"]); ok && exp.After(date) {
			f.lifetime = exp.Sub(date)
		}
	}
	if lm, ok := httpDate(h["Last-Modified"]); ok && date.After(lm) {
		f.heuristic = min(date.Sub(lm)/heuristicFraction, heuristicMax).Truncate(time.Second)
	}
	// §4.2.3: the age the response already had when it arrived.
	apparent := max(respTime.Sub(date), 0)
	age, _ := ageValue(h["Age"])
	corrected := time.Duration(age)*time.Second + max(respTime.Sub(reqTime), 0)
	f.initialAge = max(apparent, corrected).Truncate(time.Second)
	if cc.swr >= 0 || cc.sie >= 0 {
		f.swrSet = true
		f.serveStale = time.Duration(max(cc.swr, cc.sie, 0)) * time.Second
	}
	return f
}

// Bounds of how long a response that may not be served stale is kept past
// its freshness for revalidation (a conditional request instead of a full
// one): as long as it was fresh, within these.
const (
	minKeep = 10 * time.Minute
	maxKeep = 24 * time.Hour
)

// placement is where a response goes: its guard windows, or why it is not
// stored.
type placement struct {
	w guard.Windows
	// mustRevalidate: past Fresh the response is only kept, for Stale,
	// to be revalidated; it is never served stale.
	mustRevalidate bool
	reason         string // not "" when the response is not stored
}

// windows are p's windows as the guard takes them.
func (p placement) windows() guard.Windows {
	w := p.w
	w.MustRevalidate = p.mustRevalidate
	return w
}

// place decides the windows of a shareable response. Without
// UpstreamWindows or RequireFreshness the Group's windows apply; with
// them the response's own (§4.2), and with RequireFreshness a response
// that states no freshness is not stored.
func (e *engine) place(f freshness) placement {
	if !e.upstream && !e.strict {
		return placement{}
	}
	if !f.explicit && e.heuristic && !e.strict && !f.noCache && f.heuristic > 0 && heuristicStatus[f.status] {
		// §4.2.2: as if it had said max-age, a share of its age.
		f.explicit, f.lifetime = true, f.heuristic
	}
	if !f.explicit {
		switch {
		case f.noCache:
			// Never used without revalidation: its lifetime is moot.
			return e.revalidateEachUse(f, maxKeep)
		case e.strict:
			return placement{reason: "no explicit freshness"}
		case f.swrSet:
			// The Group's fresh window, the response's stale one.
			return placement{w: guard.Windows{Stale: orDisabled(f.serveStale)}}
		}
		return placement{}
	}
	if f.noCache {
		return e.revalidateEachUse(f, f.lifetime)
	}
	fresh := f.lifetime - f.initialAge
	overrun, staleOnArrival := time.Duration(0), fresh <= 0
	if staleOnArrival {
		// Stored only to be served stale, where it may be, or to be
		// revalidated.
		overrun, fresh = -fresh, guard.Expired
	}
	w := guard.Windows{Fresh: fresh}
	if s := f.serveStale - overrun; !f.noServeStale && s > 0 {
		w.Stale = s
		return placement{w: w}
	}
	if !f.validator {
		if staleOnArrival {
			return placement{reason: "stale on arrival"}
		}
		w.Stale = guard.Disabled
		return placement{w: w}
	}
	w.Stale = keepFor(f.lifetime)
	return placement{w: w, mustRevalidate: true}
}

// revalidateEachUse places a no-cache response: stored, but never served
// without revalidation; useless (not stored) without a validator.
func (e *engine) revalidateEachUse(f freshness, lifetime time.Duration) placement {
	if !f.validator {
		return placement{reason: "no-cache without a validator"}
	}
	// The requests collapsed into one revalidation (RFC 9111 §4 lets a
	// cache collapse them) share its answer; any later one revalidates.
	return placement{w: guard.Windows{Fresh: guard.Expired, Stale: keepFor(lifetime)}, mustRevalidate: true}
}

func keepFor(lifetime time.Duration) time.Duration {
	return min(max(lifetime, minKeep), maxKeep)
}

func orDisabled(d time.Duration) time.Duration {
	if d <= 0 {
		return guard.Disabled
	}
	return d
}
