package conformance

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"testing"

	"github.com/stampede-go/stampede/guard"
)

// interimResponses: a 103 Early Hints reaches the client whose request ran
// the handler (RFC 9110 §15.2), and no other: it is not stored, nor
// replayed with a hit, nor taken for the final status.
func interimResponses(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.Header().Set("X-Early", "only in the 103")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("X-Early") // as a reverse proxy clears a relayed 1xx's fields
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, "page")
	})
	g := NewGroup(t, top.client(t), guard.Options{})
	base := quietServer(t, a.New(g, Config{}, origin)).URL
	var early []string
	get := func() (interim []int, status int, body, cs string) {
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			interim = append(interim, code)
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, base+"/early", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		early = resp.Header.Values("X-Early")
		b, _ := io.ReadAll(resp.Body)
		return interim, resp.StatusCode, string(b), resp.Header.Get("Cache-Status")
	}
	if in, st, body, cs := get(); len(in) != 1 || in[0] != 103 || st != 200 || body != "page" || cs != "stampede; fwd=miss; stored" {
		t.Errorf("the request that ran the handler: interim %v, %d %q %q", in, st, body, cs)
	}
	if len(early) != 0 {
		t.Errorf("the 103's field reached the final response: %q", early)
	}
	if in, st, body, cs := get(); len(in) != 0 || st != 200 || body != "page" || cs != "stampede; hit" {
		t.Errorf("a hit: interim %v, %d %q %q; want no interim response", in, st, body, cs)
	}
}
