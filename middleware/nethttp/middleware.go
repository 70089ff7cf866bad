package guardhttp

import (
	"errors"
	"net/http"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/httpcache"
)

// Config configures Middleware: the settings every stampede HTTP adapter
// shares, documented on [httpcache.Config], with Skipper and KeyFunc
// taking the *http.Request. The zero value is safe: see the package
// documentation of httpcache for what is never shared.
type Config = httpcache.Config[*http.Request]

// Middleware returns a middleware that serves GET responses of the handler
// it wraps through g. It panics on a nil g or a Config out of range (see
// the package documentation).
func Middleware(g *guard.Group, cfg Config) func(http.Handler) http.Handler {
	eng, err := httpcache.New(g, cfg)
	if err != nil {
		panic("guardhttp: " + err.Error())
	}
	return func(next http.Handler) http.Handler {
		run := func(w http.ResponseWriter, r *http.Request) error {
			next.ServeHTTP(w, r)
			return nil
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if eng.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			if inv := eng.Unsafe(r); inv != nil {
				// RFC 9111 §4.4: invalidated before the status goes out.
				uw := &httpcache.UnsafeWriter{ResponseWriter: w, Before: inv}
				_ = eng.Serve(r, uw, r, nil, run)
				uw.Finish()
				return
			}
			err := eng.Serve(r, w, r, nil, run)
			if err == nil {
				return
			}
			if se := (*httpcache.StatusError)(nil); errors.As(err, &se) {
				http.Error(w, http.StatusText(se.Code), se.Code)
			}
		})
	}
}
