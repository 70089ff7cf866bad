package guard

import (
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stampede-go/stampede/internal/redistest"
)

// TestLocalTierOneHookPerClient: the tier follows a *redis.Client's dials
// with a hook, which go-redis never removes. Groups made and closed on one
// client, one after another (a Group per tenant, per request), must not
// pile hooks on it, which every dial passes through: each added one.
func TestLocalTierOneHookPerClient(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	const groups = 100
	for range groups {
		g, err := New(rdb, Options{Namespace: redistest.Key(t) + ":"})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := hooksOn(t, rdb), 1; got > want {
		t.Errorf("%d Groups made and closed on a client left %d hooks on it, want at most %d", groups, got, want)
	}
}

// hooksOn returns how many hooks rdb holds. go-redis does not say: this
// reads its hooksMixin (v9.23: state, an atomic pointer to a struct whose
// first field is the slice of hooks), and skips the test if it is laid out
// otherwise.
func hooksOn(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	type hooksState struct{ slice []redis.Hook }
	mixin := reflect.ValueOf(rdb).Elem().FieldByName("hooksMixin")
	if !mixin.IsValid() {
		t.Skip("go-redis's client holds no hooksMixin")
	}
	state := mixin.FieldByName("state")
	if !state.IsValid() || state.Kind() != reflect.Pointer || state.Type().Elem().Name() != "Pointer[github.com/redis/go-redis/v9.hooksState]" {
		t.Skipf("go-redis's hooks are laid out otherwise: %v", state.Type())
	}
	p := (*atomic.Pointer[hooksState])(state.UnsafePointer())
	return len(p.Load().slice)
}
