package guard

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/stampede-go/stampede/internal/redistest"
	"go.uber.org/goleak"
)

// TestPerCallTTLsAndJitter: WithFreshFor/WithStaleFor set the entry's
// windows; jitter only shortens the fresh window, within Jitter.
func TestPerCallTTLsAndJitter(t *testing.T) {
	_, rdb := redistest.Mini(t)
	g := newGroup(t, rdb, Options{Jitter: 0.5})
	load := func(context.Context) ([]byte, error) { return []byte("v"), nil }
	for i := range 20 {
		key := "k" + string(rune('a'+i))
		if _, err := g.Do(ctxT(t), key, load, WithFreshFor(10*time.Second), WithStaleFor(20*time.Second)); err != nil {
			t.Fatal(err)
		}
		raw, _ := rdb.Get(ctxT(t), g.names(key).entry).Bytes()
		e, err := entry.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		fresh := e.FreshUntil - e.Written
		stale := e.StaleUntil - e.FreshUntil
		if fresh < 5000 || fresh > 10000 || stale != 20000 {
			t.Fatalf("windows fresh %dms stale %dms, want fresh in [5s, 10s] and stale 20s", fresh, stale)
		}
	}
	if j := (&Group{opts: Options{Jitter: 0}}).jittered(time.Second); j != time.Second {
		t.Fatalf("no jitter changed %v", j)
	}
}

// TestNegativeOptionFields: every numeric field of Options set negative
// (other than Disabled, which turns the fields that can be off off) makes
// New fail with an error naming that field, before New starts anything. The fields are found by reflection so a field added later is
// covered too.
func TestNegativeOptionFields(t *testing.T) {
	_, rdb := redistest.Mini(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	typ := reflect.TypeFor[Options]()
	tested := 0
	for i := range typ.NumField() {
		f := typ.Field(i)
		var o Options
		v := reflect.ValueOf(&o).Elem().Field(i)
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64:
			v.SetInt(Disabled - 1)
		case reflect.Float64:
			v.SetFloat(-0.5)
		default:
			continue
		}
		tested++
		t.Run(f.Name, func(t *testing.T) {
			g, err := New(rdb, o)
			if err == nil {
				_ = g.Close()
				t.Fatalf("New accepted %s = %v", f.Name, v)
			}
			if g != nil {
				t.Fatal("New returned a Group with its error")
			}
			if !strings.Contains(err.Error(), f.Name) {
				t.Fatalf("error %q does not name %s", err, f.Name)
			}
		})
	}
	if tested < 16 { // 10 durations, 3 ints, 2 floats, the policy: reflection must not silently find nothing
		t.Fatalf("only %d numeric fields found in Options", tested)
	}
}

// TestZeroCallDurations pins what 0 means, the same everywhere: the
// Group's value (as a zero Options field means its default). Disabled
// means no stale window. The windows are read back from the stored entry.
func TestZeroCallDurations(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	const freshFor, staleFor = time.Minute, 5 * time.Minute
	g := newGroup(t, rdb, Options{FreshFor: freshFor, StaleFor: staleFor, Jitter: Disabled})
	for _, c := range []struct {
		name         string
		opts         []CallOption
		fresh, stale time.Duration
	}{
		{"WithFreshFor(0)", []CallOption{WithFreshFor(0)}, freshFor, staleFor},
		{"WithStaleFor(0)", []CallOption{WithStaleFor(0)}, freshFor, staleFor},
		{"both 0", []CallOption{WithFreshFor(0), WithStaleFor(0)}, freshFor, staleFor},
		{"WithStaleFor(Disabled)", []CallOption{WithStaleFor(Disabled)}, freshFor, 0},
		{"positive", []CallOption{WithFreshFor(2 * time.Second), WithStaleFor(3 * time.Second)}, 2 * time.Second, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := redistest.Key(t)
			r, err := g.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return []byte("v"), nil }, c.opts...)
			if err != nil || r.Status != Miss {
				t.Fatalf("got %v, %v; want a miss", r.Status, err)
			}
			wantWindows(t, rdb, g, key, c.fresh, c.stale)
		})
	}
}

// TestJitterBounds: a jittered window is never longer than asked and never
// shorter than (1 - Jitter) of it; Disabled leaves it exact.
func TestJitterBounds(t *testing.T) {
	for _, j := range []float64{0.1, 0.5, Disabled} {
		o, err := Options{Jitter: j}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		g := &Group{opts: o}
		const d = time.Minute
		lo, hi := d, time.Duration(0)
		for range 10000 {
			got := g.jittered(d)
			lo, hi = min(lo, got), max(hi, got)
		}
		floor := d - time.Duration(o.Jitter*float64(d))
		if hi > d || lo < floor {
			t.Fatalf("Jitter %v: windows in [%v, %v], want within [%v, %v]", j, lo, hi, floor, d)
		}
		if j == Disabled && (lo != d || hi != d) {
			t.Fatalf("Disabled: windows in [%v, %v], want exactly %v", lo, hi, d)
		}
		if j > 0 && hi-lo < time.Duration(o.Jitter*float64(d))/2 {
			t.Fatalf("Jitter %v: windows in [%v, %v] barely spread", j, lo, hi)
		}
	}
}
