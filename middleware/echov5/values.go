package guardecho

import (
	"maps"
	"reflect"
	"sync"
	"unsafe"

	"github.com/labstack/echo/v5"
)

// Values earlier middleware set with c.Set (a tenant, a user, a locale)
// must reach the handler in every run of it, a detached one included: the
// run calls the route's handler on a context of its own, since c goes back
// to echo's pool when its request ends, possibly before the run. Echo v5
// has no way to list a context's values, so they are copied from its store
// directly, under its lock. The layout is checked once, when the package
// is initialised: if a future echo changes it, storeKnown is false and the
// middleware serves every request straight to the handler (Cache-Status
// bypass) rather than run it without the values it may read.

var (
	storeOffset, lockOffset uintptr
	storeKnown              = func() bool {
		t := reflect.TypeFor[echo.Context]()
		s, ok1 := t.FieldByName("store")
		l, ok2 := t.FieldByName("lock")
		if !ok1 || !ok2 || s.Type != reflect.TypeFor[map[string]any]() || l.Type != reflect.TypeFor[sync.RWMutex]() {
			return false
		}
		storeOffset, lockOffset = s.Offset, l.Offset
		return true
	}()
)

// values returns a copy of the values set on c (nil when none).
func values(c *echo.Context) map[string]any {
	p := unsafe.Pointer(c)
	mu := (*sync.RWMutex)(unsafe.Add(p, lockOffset))
	mu.RLock()
	defer mu.RUnlock()
	m := *(*map[string]any)(unsafe.Add(p, storeOffset))
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
