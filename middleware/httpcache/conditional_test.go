package httpcache

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPrecondition: RFC 9110 §13.1 and §13.2.2, evaluated against a stored
// response.
func TestPrecondition(t *testing.T) {
	const (
		lm     = "Tue, 01 Sep 2026 10:00:00 GMT"
		before = "Mon, 31 Aug 2026 10:00:00 GMT"
		after  = "Wed, 02 Sep 2026 10:00:00 GMT"
	)
	strong := stored(200, http.Header{"Etag": {`"v1"`}, "Last-Modified": {lm}})
	weak := stored(200, http.Header{"Etag": {`W/"v1"`}})
	dateOnly := stored(200, http.Header{"Date": {lm}})
	notFound := stored(404, http.Header{"Etag": {`"v1"`}})
	rows := []struct {
		name string
		sr   storedResponse
		hdr  map[string]string
		want int
	}{
		{"no preconditions", strong, nil, 0},
		{"INM matches", strong, map[string]string{"If-None-Match": `"v1"`}, 304},
		{"INM weak comparison: W/ request tag", strong, map[string]string{"If-None-Match": `W/"v1"`}, 304},
		{"INM weak comparison: weak stored tag", weak, map[string]string{"If-None-Match": `"v1"`}, 304},
		{"INM list", strong, map[string]string{"If-None-Match": `"a", "v1" ,"b"`}, 304},
		{"INM star", strong, map[string]string{"If-None-Match": `*`}, 304},
		{"INM other tag", strong, map[string]string{"If-None-Match": `"v2"`}, 0},
		{"INM unquoted is no tag", strong, map[string]string{"If-None-Match": `v1`}, 0},
		{"INM wins over IMS", strong, map[string]string{"If-None-Match": `"v2"`, "If-Modified-Since": after}, 0},
		{"IMS not modified", strong, map[string]string{"If-Modified-Since": lm}, 304},
		{"IMS later", strong, map[string]string{"If-Modified-Since": after}, 304},
		{"IMS modified since", strong, map[string]string{"If-Modified-Since": before}, 0},
		{"IMS invalid date ignored", strong, map[string]string{"If-Modified-Since": "yesterday"}, 0},
		{"IMS against Date without Last-Modified", dateOnly, map[string]string{"If-Modified-Since": after}, 304},
		{"IM strong match", strong, map[string]string{"If-Match": `"v1"`}, 0},
		{"IM weak stored tag never matches", weak, map[string]string{"If-Match": `"v1"`}, 412},
		{"IM other tag", strong, map[string]string{"If-Match": `"v2"`}, 412},
		{"IM star", strong, map[string]string{"If-Match": `*`}, 0},
		{"IUS modified after", strong, map[string]string{"If-Unmodified-Since": before}, 412},
		{"IUS unmodified", strong, map[string]string{"If-Unmodified-Since": after}, 0},
		{"IM wins over IUS", strong, map[string]string{"If-Match": `"v1"`, "If-Unmodified-Since": before}, 0},
		{"IM passes, INM matches", strong, map[string]string{"If-Match": `"v1"`, "If-None-Match": `"v1"`}, 304},
		{"non-2xx ignores preconditions", notFound, map[string]string{"If-None-Match": `"v1"`}, 0},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for k, v := range row.hdr {
				r.Header.Set(k, v)
			}
			if got := precondition(r, &row.sr); got != row.want {
				t.Errorf("got %d, want %d", got, row.want)
			}
		})
	}
}

// TestNotModifiedFields: a 304 carries the fields RFC 9110 §15.4.5 lists,
// and no body or content metadata.
func TestNotModifiedFields(t *testing.T) {
	sr := stored(200, http.Header{
		"Etag": {`"v1"`}, "Cache-Control": {"max-age=60"}, "Vary": {"Accept-Encoding"},
		"Content-Type": {"text/plain"}, "Content-Encoding": {"gzip"}, "Last-Modified": {"Tue, 01 Sep 2026 10:00:00 GMT"},
	})
	rec := httptest.NewRecorder()
	writeNotModified(rec, &sr, []string{"3"}, "stampede; hit")
	if rec.Code != 304 || rec.Body.Len() != 0 {
		t.Fatalf("status %d, body %q", rec.Code, rec.Body)
	}
	for k, want := range map[string]string{"Etag": `"v1"`, "Cache-Control": "max-age=60", "Vary": "Accept-Encoding", "Age": "3", "Cache-Status": "stampede; hit", "Content-Type": "", "Content-Encoding": "", "Last-Modified": ""} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// TestStripConditionals: the handler call that fills an entry never sees
// the client's preconditions.
func TestStripConditionals(t *testing.T) {
	h := http.Header{"Accept": {"*/*"}}
	for _, name := range conditionalHeaders {
		h.Set(name, "x")
	}
	stripConditionals(h)
	if len(h) != 1 {
		t.Errorf("left %v", h)
	}
}

// stored decodes the stored response of status and h with body "body".
func stored(status int, h http.Header) storedResponse {
	sr, err := decodeResponse(encodeResponse(status, 0, h, []byte("body")))
	if err != nil {
		panic(err)
	}
	return sr
}
