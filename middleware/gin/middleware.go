package guardgin

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/httpcache"
)

// Config configures Middleware: the settings every stampede HTTP adapter
// shares, documented on [httpcache.Config], with Skipper and KeyFunc
// taking the *gin.Context. The zero value is safe.
type Config = httpcache.Config[*gin.Context]

// Middleware returns a gin middleware that serves GET responses through g.
// It panics on a nil g or a Config out of range (see the package documentation).
func Middleware(g *guard.Group, cfg Config) gin.HandlerFunc {
	eng, err := httpcache.New(g, cfg)
	if err != nil {
		panic("guardgin: " + err.Error())
	}
	return func(c *gin.Context) {
		if eng.Skip(c) {
			c.Next()
			return
		}
		r := c.Request
		if inv := eng.Unsafe(r); inv != nil {
			// RFC 9111 §4.4: invalidated before the status goes out.
			uw := &unsafeWriter{ResponseWriter: c.Writer, before: inv}
			c.Writer = uw
			c.Next()
			c.Writer = uw.ResponseWriter
			uw.header()
			return
		}
		if c.FullPath() == "" {
			// No route matched: the handler ending this chain is this
			// middleware, or another, not a route's (see the package
			// documentation).
			c.Next()
			return
		}
		// A run may outlive this request, and c goes back to gin's pool
		// when the request ends: the run gets a copy, taken now (for the
		// methods that may share: the others never run detached).
		var run httpcache.Handler
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			cp, handler := c.Copy(), c.Handler()
			run = func(w http.ResponseWriter, req *http.Request) error {
				return runDetached(cp, handler, w, req)
			}
		}
		direct := func() error {
			c.Next() // its errors are in c.Errors already
			return nil
		}
		err := eng.Serve(c, c.Writer, r, direct, run)
		var se *httpcache.StatusError
		var re runErrors
		switch {
		case errors.As(err, &se):
			_ = c.AbortWithError(se.Code, se)
		case errors.As(err, &re):
			// This request's own handler run recorded errors; its
			// response was written to c.Writer.
			c.Errors = append(c.Errors, re...)
			c.Abort()
		case err != nil:
			_ = c.Error(err)
			c.Abort()
		default:
			// Answered (from the cache, or by c.Next, which ran the
			// rest of the chain already).
			c.Abort()
		}
	}
}

// runErrors are the errors a detached run's handler recorded with c.Error:
// the engine never caches a response that comes with an error.
type runErrors []*gin.Error

func (re runErrors) Error() string {
	msgs := make([]string, len(re))
	for i, e := range re {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// runDetached calls handler on a copy of cp that writes to w and reads req,
// and returns the errors the handler recorded with c.Error.
func runDetached(cp *gin.Context, handler gin.HandlerFunc, w http.ResponseWriter, req *http.Request) error {
	lc := cp.Copy()
	lc.Request = req
	dw := newWriter(w)
	lc.Writer = dw
	handler(lc)
	dw.WriteHeaderNow() // c.Status(204) and no body: gin writes it after the chain
	if len(lc.Errors) == 0 {
		return nil
	}
	return runErrors(lc.Errors)
}
