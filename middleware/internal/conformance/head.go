package conformance

import (
	"net/http"
	"testing"
)

// headRows: HEAD (§4, RFC 9110 §9.3.2).
func headRows() []rfcRow {
	return []rfcRow{
		{"RFC 9110 §9.3.2", "HEAD after a stored GET: from the store, no body", nil, always(200, "abc", "Cache-Control", "max-age=3600"),
			[]step{{origin: 1}, {method: http.MethodHead, body: text(""), origin: 1, want: []string{"Content-Length", "3", "Cache-Status", "stampede; hit"}}}},
		{"RFC 9110 §9.3.2", "HEAD with nothing stored reaches the origin as HEAD, stores nothing", nil, always(200, "abc", "Cache-Control", "max-age=3600"),
			[]step{{method: http.MethodHead, origin: 1, check: func(t *testing.T, _ *http.Response, seen []*http.Request) {
				if seen[0].Method != http.MethodHead {
					t.Errorf("the origin saw %s, want HEAD", seen[0].Method)
				}
			}}, {body: text("abc"), origin: 2}}},
	}
}
