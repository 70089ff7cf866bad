package guardgin

import (
	"errors"
	"net/http"
	"reflect"
	"runtime"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/cachestatus"
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
	return middlewareFor(eng)
}

// middlewareFor is the middleware of eng. Every one it returns is one
// closure, of one code pointer, which gin names cacheName. Not inlined: an
// inlined copy would be a closure of a code pointer of its own.
//
//go:noinline
func middlewareFor(eng *httpcache.Engine[*gin.Context]) gin.HandlerFunc {
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
			if !uw.Written() && len(c.Errors) > 0 {
				// Nothing written, and errors recorded for a middleware
				// before this one to render: the status goes out then,
				// through uw, which decides on it.
				return
			}
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
		if between, cache := handlersAfter(c); between {
			// A detached run calls the route's handler alone: the
			// handlers between (a group's access check) would never run,
			// not even for the request itself. When one of them is this
			// middleware again (a group's, a route's), that one serves.
			if !cache {
				c.Header("Cache-Status", cachestatus.Bypass+`; detail="handlers after the cache"`)
			}
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
		var re *runErrors
		switch {
		case errors.As(err, &se):
			_ = c.AbortWithError(se.Code, se)
		case errors.As(err, &re):
			// This request's own handler run recorded errors; its
			// response was written to c.Writer. The keys it set go with
			// them, for the app's error middleware.
			c.Errors = append(c.Errors, re.errs...)
			for k, v := range re.keys {
				c.Set(k, v)
			}
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
type runErrors struct {
	errs []*gin.Error
	keys map[any]any // the run's Keys
}

func (re *runErrors) Error() string {
	msgs := make([]string, len(re.errs))
	for i, e := range re.errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// runDetached calls handler on a copy of cp that writes to w and reads req,
// and returns the errors the handler recorded with c.Error.
func runDetached(cp *gin.Context, handler gin.HandlerFunc, w http.ResponseWriter, req *http.Request) error {
	lc := cp.Copy()
	lc.Request = req
	dw := newWriter(req.Context(), w)
	lc.Writer = dw
	handler(lc)
	dw.WriteHeaderNow() // c.Status(204) and no body: gin writes it after the chain
	if len(lc.Errors) == 0 {
		return nil
	}
	return &runErrors{errs: lc.Errors, keys: lc.Keys}
}

// handlersAfter reports whether c's chain holds handlers between the one
// running (this middleware) and the route's handler, the last, and
// whether one of them is this middleware again.
func handlersAfter(c *gin.Context) (between, cache bool) {
	if chainKnown {
		v := reflect.ValueOf(c).Elem()
		chain, at := v.FieldByIndex(handlersField), int(v.FieldByIndex(indexField).Int())
		for i := at + 1; i < chain.Len()-1; i++ {
			between = true
			if chain.Index(i).Pointer() == cacheCode {
				return true, true
			}
		}
		return between, false
	}
	// A gin of another layout: by name, from this middleware's last.
	names := c.HandlerNames()
	last := -1
	for i, n := range names {
		if n == cacheName {
			if last >= 0 {
				cache = true
			}
			last = i
		}
	}
	return last >= 0 && len(names)-last > 2, cache
}

// gin.Context's handler chain and the index of the handler running in it,
// read by reflection (gin exports neither), when their layout is the one
// known: HandlersChain handlers, int8 index.
var (
	handlersField, indexField []int
	chainKnown                = func() bool {
		t := reflect.TypeFor[gin.Context]()
		h, ok1 := t.FieldByName("handlers")
		i, ok2 := t.FieldByName("index")
		if !ok1 || !ok2 || h.Type != reflect.TypeFor[gin.HandlersChain]() || i.Type.Kind() != reflect.Int8 {
			return false
		}
		handlersField, indexField = h.Index, i.Index
		return true
	}()
)

// cacheCode and cacheName are the code pointer of this package's
// middleware and the name gin gives it (Context.HandlerNames); set by
// init, as handlersAfter, which reads them, is part of that middleware.
var (
	cacheCode uintptr
	cacheName string
)

func init() {
	cacheCode = reflect.ValueOf(middlewareFor(nil)).Pointer()
	cacheName = runtime.FuncForPC(cacheCode).Name()
}
