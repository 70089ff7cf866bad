package conformance

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
)

// reflector is the origin: it answers with every input an application may
// read, so that any input the key ignores shows in what the victim gets.
type reflector struct {
	reads            string   // one more request header it reads
	vary             bool     // and names in Vary
	ignoreForwarding bool     // it validates forwarding headers itself: reads none
	headers          []string // response header pairs
}

func (o reflector) handler(calls *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Host != "good.example" {
			// Routers match hosts exactly (net/http's ServeMux host
			// patterns, echo's Echo.Host): another host, even in other
			// letter case, reaches another site.
			http.Error(w, fmt.Sprintf("no site %q", r.Host), http.StatusNotFound)
			return
		}
		var b strings.Builder
		method := r.Method
		for _, h := range appMethodOverride {
			if v := r.Header.Get(h); v != "" {
				method = v
			}
		}
		if v := r.URL.Query().Get("_method"); v != "" {
			method = v
		}
		fmt.Fprintf(&b, "method %s\nhost %q tls %v\n", method, r.Host, r.TLS != nil)
		fmt.Fprintf(&b, "target scheme %q user %q host %q opaque %q\n", r.URL.Scheme, r.URL.User.String(), r.URL.Host, r.URL.Opaque)
		fmt.Fprintf(&b, "path %q raw %q\n", r.URL.Path, r.URL.RawPath)
		q := r.URL.Query()
		for _, k := range slices.Sorted(maps.Keys(q)) {
			fmt.Fprintf(&b, "query %q=%q\n", k, q[k])
		}
		if !o.ignoreForwarding {
			for _, h := range appForwarding {
				vals := cgiValues(r.Header, h)
				if h == "Forwarded" {
					vals = forwardedNaively(vals)
				}
				if len(vals) > 0 {
					fmt.Fprintf(&b, "forwarding %s %q\n", h, vals)
				}
			}
		}
		if c := r.Header.Values("Cookie"); len(c) > 0 {
			fmt.Fprintf(&b, "private page of %q\n", c)
		}
		if a := r.Header.Get("Authorization"); a != "" {
			fmt.Fprintf(&b, "private page of %q\n", a)
		}
		if body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<10)); len(body) > 0 {
			fmt.Fprintf(&b, "body %q\n", body)
		}
		if o.reads != "" {
			fmt.Fprintf(&b, "%s %q\n", o.reads, r.Header.Values(o.reads))
			if o.vary {
				w.Header().Add("Vary", o.reads)
			}
		}
		for i := 0; i+1 < len(o.headers); i += 2 {
			w.Header().Set(o.headers[i], o.headers[i+1])
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		_, _ = io.WriteString(w, b.String())
	})
}

// forwardedNaively reads Forwarded as a careless application does:
// splitting on ';' and ',' without regard to quotes, keeping every pair but
// the client's for=.
func forwardedNaively(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.FieldsFunc(v, func(c rune) bool { return c == ';' || c == ',' }) {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(strings.ToLower(p), "for=") {
				out = append(out, p)
			}
		}
	}
	return out
}

// cgiValues returns the values of the request field name as a CGI, WSGI,
// Rack or PHP application reads them (HTTP_X_FORWARDED_HOST): "-" and "_"
// are one, so X_Forwarded_Host counts too; in the order of the names.
func cgiValues(h http.Header, name string) []string {
	cgi := func(k string) string { return strings.ReplaceAll(strings.ToUpper(k), "-", "_") }
	var vals []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if cgi(k) == cgi(name) {
			vals = append(vals, h[k]...)
		}
	}
	return vals
}
