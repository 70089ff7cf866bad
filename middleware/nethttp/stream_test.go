package guardhttp_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// Generated request streams: random methods, variant headers (keyed
// forwarding headers, KeyHeaders, a header the response varies on), query
// strings and Locations, sent to three nodes, then the fleet's checks.
// The seeds of bounded_test.go are the streams that found issue 32; this
// makes more. Longer: -stampede.stream=20000, other streams:
// -stampede.seed=N.

var (
	seedFlag   = flag.Uint64("stampede.seed", 1, "seed of the generated request streams")
	streamFlag = flag.Int("stampede.stream", 3000, "requests per generated stream")
)

// streamSite answers every method: GET a page (varying on
// Accept-Language under /v/), any other method 200, 201 or 204 with the
// Location and Content-Location its query names.
var streamSite = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		w.Header().Set("Cache-Control", "max-age=1")
		if len(r.URL.Path) > 3 && r.URL.Path[:3] == "/v/" {
			w.Header().Set("Vary", "Accept-Language")
		}
		fmt.Fprint(w, "page ", r.URL.Path)
		return
	}
	if loc := q.Get("loc"); loc != "" {
		w.Header().Set("Location", loc)
	}
	if cl := q.Get("cl"); cl != "" {
		w.Header().Set("Content-Location", cl)
	}
	w.WriteHeader([]int{http.StatusOK, http.StatusCreated, http.StatusNoContent}[len(q.Get("s"))%3])
})

// streamRequest is one generated request.
type streamRequest struct {
	method, target string
	header         http.Header
}

// generate returns n requests drawn from rng: most to a few hot paths,
// some to paths of their own.
func generate(rng *rand.Rand, n int) []streamRequest {
	paths := []string{"/a", "/b", "/v/c", "/v/d"}
	path := func() string {
		if rng.IntN(4) == 0 {
			return "/r/" + strconv.Itoa(rng.IntN(1_000_000))
		}
		return paths[rng.IntN(len(paths))]
	}
	out := make([]streamRequest, n)
	for i := range out {
		r := streamRequest{method: http.MethodGet, target: path(), header: http.Header{}}
		if rng.IntN(3) == 0 {
			r.target += "?q=" + strconv.Itoa(rng.IntN(50))
		}
		switch x := rng.IntN(100); {
		case x < 8:
			r.method = http.MethodPost
		case x < 13:
			r.method = http.MethodPut
		case x < 16:
			r.method = http.MethodDelete
		case x < 18:
			r.method = http.MethodPatch
		}
		if r.method != http.MethodGet {
			sep := "?"
			if len(r.target) > 2 && containsByte(r.target, '?') {
				sep = "&"
			}
			r.target += sep + "loc=" + url.QueryEscape(path()) + "&cl=" + url.QueryEscape(path()) + "&s=" + strconv.Itoa(rng.IntN(3))
		}
		if rng.IntN(2) == 0 {
			r.header.Set("X-Forwarded-Host", "h"+strconv.Itoa(rng.IntN(5000))+".test")
		}
		if rng.IntN(3) == 0 {
			r.header.Set("X-Variant", strconv.Itoa(rng.IntN(5000)))
		}
		r.header.Set("Accept-Language", []string{"en", "fr", "de", "x-" + strconv.Itoa(rng.IntN(5000))}[rng.IntN(4)])
		out[i] = r
	}
	return out
}

func containsByte(s string, b byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return true
		}
	}
	return false
}

// TestBoundedStreams sends a generated stream to three nodes with 1s
// windows while another client and another service use the same Redis:
// no answer is a 5xx, no script call names more than maxScriptKeys keys,
// no name lives over 5 minutes, and 3s after the stream fewer names
// remain than a tenth of its requests.
func TestBoundedStreams(t *testing.T) {
	o := guard.Options{FreshFor: time.Second, StaleFor: time.Second}
	f := newFleet(t, 3, o, guardhttp.Config{KeyHeaders: []string{"X-Variant"}}, streamSite)
	reqs := generate(rand.New(rand.NewPCG(*seedFlag, 32)), *streamFlag)
	f.slowLog(t)
	b := f.watchBystanders(t)
	var failed atomic.Int64
	parallel(len(reqs), 16, func(i int) {
		r := reqs[i]
		if st, _ := f.do(t, i, r.method, r.target, r.header); st >= 500 || st == 0 {
			if failed.Add(1) <= 5 {
				t.Errorf("%s %s: %d", r.method, r.target, st)
			}
		}
	})
	b.end(t)
	f.checkSlowLog(t)
	f.checkRetention(t, f.names(t), 5*time.Minute)
	time.Sleep(3 * time.Second) // the claim is about what is left 3s later
	if names := f.names(t); len(names)*10 >= len(reqs) {
		t.Errorf("%d names left 3s after %d requests with 1s windows, want fewer than %d: %v", len(names), len(reqs), len(reqs)/10, kinds(names))
	}
}

// kinds counts names by their suffix (":fence", ":tkeys"...); a name
// that ends in a hash (its last part is long) is an entry.
func kinds(names map[string]time.Duration) map[string]int {
	out := map[string]int{}
	for n := range names {
		suffix := n[strings.LastIndexByte(n, ':')+1:]
		if len(suffix) > 12 || strings.ContainsAny(suffix, "{}") {
			suffix = "entry"
		}
		out[suffix]++
	}
	return out
}
