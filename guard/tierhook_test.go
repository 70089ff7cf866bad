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
	base := hooksOn(t, rdb)
	const groups = 100
	makeAndClose(t, rdb, groups)
	if got, want := hooksOn(t, rdb), base+1; got > want {
		t.Errorf("%d Groups made and closed on a client left %d hooks on it, want at most %d", groups, got, want)
	}
}

// TestLocalTierOneCallbackPerCluster: the same for a cluster client, on
// which the tier registers an OnNewNode callback (go-redis removes none).
func TestLocalTierOneCallbackPerCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster: the standalone row covers the registry")
	}
	rdb := redistest.SharedCluster(t).Client(t)
	base := newNodeCallbacks(t, rdb) // go-redis's own
	const groups = 100
	makeAndClose(t, rdb, groups)
	if got, want := newNodeCallbacks(t, rdb), base+1; got > want {
		t.Errorf("%d Groups made and closed on a cluster client left %d OnNewNode callbacks on it, want at most %d", groups, got, want)
	}
}

// newNodeCallbacks returns how many OnNewNode callbacks rdb holds, read
// as hooksOn reads hooks (v9.23: nodes, a *clusterNodes whose onNewNode
// is a slice of funcs), skipping the test if laid out otherwise.
func newNodeCallbacks(t *testing.T, rdb *redis.ClusterClient) int {
	t.Helper()
	nodes := reflect.ValueOf(rdb).Elem().FieldByName("nodes")
	if !nodes.IsValid() || nodes.Kind() != reflect.Pointer {
		t.Skip("go-redis's cluster client holds no nodes")
	}
	fns := nodes.Elem().FieldByName("onNewNode")
	if !fns.IsValid() || fns.Kind() != reflect.Slice {
		t.Skip("go-redis's cluster nodes keep their callbacks otherwise")
	}
	return fns.Len()
}

// makeAndClose makes n Groups on rdb and closes each.
func makeAndClose(tb testing.TB, rdb redis.UniversalClient, n int) {
	tb.Helper()
	for range n {
		g, err := New(rdb, Options{Namespace: redistest.Key(tb) + ":"})
		if err != nil {
			tb.Fatal(err)
		}
		if err := g.Close(); err != nil {
			tb.Fatal(err)
		}
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
