package guardecho

import (
	"maps"
	"reflect"
	"sync"
	"unsafe"

	"github.com/labstack/echo/v4"
)

// Values earlier middleware set with c.Set (a tenant, a user, a locale)
// must reach the handler in every run of it, a detached one included: the
// run calls the handler on a context of its own, since c goes back to
// echo's pool when its request ends, possibly before the run. Echo has no
// way to list a context's values, so they are copied from the store of
// echo's own context type, under its lock; a custom context that embeds
// echo.Context (echo's documented way to extend it) is unwrapped to the
// one it embeds. The layout is checked once, when the package is
// initialised. A context the middleware cannot read (a future echo that
// changed the layout, a custom context that does not embed echo's) is
// served straight to the handler (Cache-Status bypass) rather than run
// without the values it may read.

// contextType is echo's own context type (*echo.context).
var contextType = reflect.TypeOf(echo.New().NewContext(nil, nil))

var (
	storeOffset, lockOffset uintptr
	storeKnown              = func() bool {
		if contextType.Kind() != reflect.Pointer || contextType.Elem().Kind() != reflect.Struct {
			return false
		}
		t := contextType.Elem()
		s, ok1 := t.FieldByName("store")
		l, ok2 := t.FieldByName("lock")
		if !ok1 || !ok2 || s.Type != reflect.TypeFor[echo.Map]() || l.Type != reflect.TypeFor[sync.RWMutex]() {
			return false
		}
		storeOffset, lockOffset = s.Offset, l.Offset
		return true
	}()
)

// values returns a copy of the values set on c, and false when c's values
// cannot be read.
func values(c echo.Context) (map[string]any, bool) {
	if !storeKnown {
		return nil, false
	}
	v := reflect.ValueOf(c)
	for depth := 0; v.IsValid() && v.Type() != contextType && depth < 8; depth++ {
		// A custom context: the echo.Context it embeds.
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return nil, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return nil, false
		}
		f, ok := v.Type().FieldByName("Context")
		if !ok || !f.Anonymous || f.Type != reflect.TypeFor[echo.Context]() {
			return nil, false
		}
		v = v.FieldByIndex(f.Index)
		if v.IsNil() {
			return nil, false
		}
		v = v.Elem()
	}
	if !v.IsValid() || v.Type() != contextType {
		return nil, false
	}
	p := v.UnsafePointer()
	mu := (*sync.RWMutex)(unsafe.Add(p, lockOffset))
	mu.RLock()
	defer mu.RUnlock()
	m := *(*echo.Map)(unsafe.Add(p, storeOffset))
	if len(m) == 0 {
		return nil, true
	}
	return maps.Clone(m), true
}
