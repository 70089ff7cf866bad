package conformance

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// byteSource is a rand.Source that reads its numbers from fuzz input.
// Past the input's end it reads as all ones, never zero: IntN(n) draws
// again on a few values, zero among them for every n not a power of two,
// so a source stuck at zero made genCase draw forever. All ones is never
// drawn again, so a draw ends by the input's end.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) Uint64() uint64 {
	var v uint64
	for range 8 {
		c := byte(0xff)
		if s.i < len(s.b) {
			c = s.b[s.i]
		}
		s.i++
		v = v<<8 | uint64(c)
	}
	return v
}

// sanitize bounds a case read from outside (fuzz input, a seed file).
func (tc *TCase) sanitize() {
	if len(tc.Requests) > 6 {
		tc.Requests = tc.Requests[:6]
	}
	for i := range tc.Requests {
		switch tc.Requests[i].Method {
		case "", http.MethodGet, http.MethodHead:
		default:
			// The oracle models GET and HEAD, the methods a cache
			// answers (the rules cover the others), and a method that
			// is not a token cannot be sent: one meaning for both.
			tc.Requests[i].Method = ""
		}
	}
	for _, r := range []*tResponse{&tc.Behaviour.Base, &tc.Behaviour.Trigger} {
		if r.Status < 100 || r.Status > 599 || (r.Status < 200 && r.Status != 0) {
			r.Status = 200
		}
		if len(r.Header) > 2000 {
			r.Header = r.Header[:2000]
		}
		// A piece stands for up to 1 MiB: a few keep a case in seconds.
		if len(r.Pieces) > 8 {
			r.Pieces = r.Pieces[:8]
		}
		switch r.End {
		case "", "panic", "abort", "hijack":
		default:
			// The handler returns on any other End, while the oracle
			// would judge it an abnormal end: one meaning for both.
			r.End = ""
		}
	}
	if tc.MaxBody <= 0 {
		tc.MaxBody = tMaxBody
	}
	// A larger one is a programmer error the middleware panics on when
	// built: the harness's, not the property's.
	tc.MaxBody = min(tc.MaxBody, tMaxValueBytes)
}

// genCase generates a case.
func genCase(rng *rand.Rand) TCase {
	tc := TCase{Behaviour: tBehaviour{Base: genResponse(rng)}, MaxBody: tMaxBody}
	tc.Behaviour.Trigger = tc.Behaviour.Base
	if rng.IntN(2) == 0 {
		tc.Behaviour.Trigger = genResponse(rng)
	}
	n := 2 + rng.IntN(4)
	for range n {
		r := tRequest{Trigger: rng.IntN(3) == 0, Expire: rng.IntN(5) == 0}
		switch rng.IntN(12) {
		case 0:
			r.Method = http.MethodHead
		case 1:
			r.Range = true
		case 2:
			r.INM = pick(rng, tETag, `W/"t1"`, `"other"`, "*")
		case 3:
			r.IMS = true
		case 4:
			r.CC = pick(rng, "no-cache", "max-age=0", "no-store", "max-stale")
		}
		tc.Requests = append(tc.Requests, r)
	}
	return tc
}

func pick[T any](rng *rand.Rand, vs ...T) T { return vs[rng.IntN(len(vs))] }

var tStatuses = []int{200, 200, 200, 200, 201, 203, 204, 206, 301, 302, 304, 400, 404, 410, 500, 502, 503}

// genResponse generates a handler response: mostly plain, shareable ones,
// with every kind of trouble mixed in.
func genResponse(rng *rand.Rand) tResponse {
	r := tResponse{Status: pick(rng, tStatuses...), Interim: rng.IntN(10) == 0}
	for range rng.IntN(4) {
		r.Header = append(r.Header, genField(rng))
	}
	if rng.IntN(3) == 0 {
		r.Header = append(r.Header, [2]string{"Etag", tETag}, [2]string{"Last-Modified", tLastModified})
		r.Conditional = rng.IntN(2) == 0
		if r.Conditional && rng.IntN(3) == 0 {
			r.NotModified = pick(rng, `"t2"`, `W/"t1"`)
		}
	}
	if rng.IntN(15) == 0 {
		// Hundreds of values of one field.
		for range 900 + rng.IntN(300) {
			r.Header = append(r.Header, [2]string{"X-Many", "v"})
		}
	}
	for range rng.IntN(4) {
		r.Pieces = append(r.Pieces, genBody(rng))
	}
	r.Flush = rng.IntN(6) == 0
	r.Length = pick(rng, "", "", "", "right", "short", "long")
	r.Twice = r.Length != "" && rng.IntN(4) == 0
	switch rng.IntN(14) {
	case 0:
		r.End = "panic"
	case 1:
		r.End = "abort"
	case 2:
		r.End = "hijack"
	}
	return r
}

// genField generates a response header field: valid, or one of the ways a
// handler can write what no decoder reads back.
func genField(rng *rand.Rand) [2]string {
	switch rng.IntN(16) {
	case 0:
		return [2]string{"Set-Cookie", "s=1"}
	case 1:
		return [2]string{"Cache-Control", pick(rng, "private", "no-store", "no-cache", "public, max-age=60", "max-age=0", "s-maxage=5")}
	case 2:
		return [2]string{"Vary", pick(rng, "*", "X-Trigger", "Accept-Language")}
	case 3:
		return [2]string{"X-Value", pick(rng, "a\r\nInjected: 1", "a\nb", "a\rb", "nul\x00byte")}
	case 4:
		return [2]string{pick(rng, "Bad Name", "X:Colon", "X(Paren)", "\x7fDel"), "v"}
	case 5:
		return [2]string{"X-Obs", "caf\u00e9 \u00ff"} // obs-text, as UTF-8 bytes (JSON seeds keep them)
	case 6:
		return [2]string{"Content-Type", pick(rng, "text/event-stream", "application/json", "text/html; charset=utf-8")}
	case 7:
		return [2]string{"Connection", "X-Hop"}
	case 8:
		return [2]string{"X-Hop", "h"}
	case 9:
		return [2]string{"x-lower-case", "lc"}
	case 10:
		return [2]string{"X-Spaces", "  padded  "}
	case 11:
		return [2]string{"X-Empty", ""}
	}
	return [2]string{"X-Field-" + strconv.Itoa(rng.IntN(4)), strconv.Itoa(rng.IntN(1000))}
}

func genBody(rng *rand.Rand) string {
	switch rng.IntN(8) {
	case 0:
		return ""
	case 1:
		return "<html><body>hi</body></html>"
	case 2:
		return "~" + strconv.Itoa(1000+rng.IntN(4000)) // that many x: may outgrow MaxBody
	case 3:
		return "\x00\x01\x02binary"
	case 4:
		return "%PDF-1.4"
	}
	return fmt.Sprintf("piece-%d ", rng.IntN(100))
}
