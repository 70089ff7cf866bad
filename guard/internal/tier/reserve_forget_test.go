package tier

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestReserveForget: a value whose load began before its key was dropped
// by an invalidation (Forget, or ForgetTag of its hash tag) is not kept;
// one begun after is. Past maxForgotten invalidations the records give
// way to a floor: nothing begun before it is kept, whatever its key.
func TestReserveForget(t *testing.T) {
	r := NewReserve(100, 1<<20)
	kept := func(key string, since time.Time) bool {
		r.PutSince(Kept{Key: key, Name: "n:" + key, Value: []byte("v"), FreshUntil: time.Now().Add(time.Minute),
			StaleUntil: time.Now().Add(time.Minute), Base: time.Now()}, since)
		_, ok := r.Get(key)
		r.Remove(key)
		return ok
	}
	before := time.Now()
	r.Forget("a")
	r.ForgetTag("t")
	after := time.Now()
	for _, c := range []struct {
		key   string
		since time.Time
		want  bool
	}{
		{"a", before, false},
		{"a", after, true},
		{"{t}x", before, false},
		{"x{t}", before, false},
		{"{t}x", after, true},
		{"{u}x", before, true},
		{"b", before, true},
	} {
		if got := kept(c.key, c.since); got != c.want {
			t.Errorf("key %q, its load begun %s the invalidation: kept %v, want %v", c.key,
				map[bool]string{true: "before", false: "after"}[c.since.Equal(before)], got, c.want)
		}
	}
	// A read sent before the invalidation replaces no kept value.
	r.PutSince(Kept{Key: "a", Name: "n:a", Value: []byte("new"), StaleUntil: time.Now().Add(time.Minute)}, time.Now())
	r.Supersede("a", []byte("old"), time.Now().Add(time.Minute), time.Now().Add(time.Minute), time.Now(), before)
	if k, _ := r.Get("a"); string(k.Value) != "new" {
		t.Errorf("a read sent before the invalidation replaced the kept value: %q", k.Value)
	}
	r.Supersede("a", []byte("newer"), time.Now().Add(time.Minute), time.Now().Add(time.Minute), time.Now(), after)
	if k, _ := r.Get("a"); string(k.Value) != "newer" {
		t.Errorf("a read sent after the invalidation did not replace the kept value: %q", k.Value)
	}
	r.Remove("a")
	// A value kept before the invalidation is dropped by it.
	r.PutSince(Kept{Key: "{t}y", Name: "n", Value: []byte("v"), StaleUntil: time.Now().Add(time.Minute)}, time.Now())
	r.ForgetTag("t")
	if _, ok := r.Get("{t}y"); ok {
		t.Error("ForgetTag left a value of its tag")
	}
	// The bound: past maxForgotten, a floor.
	for i := range maxForgotten + 1 {
		r.Forget("k" + strconv.Itoa(i))
	}
	if n := len(r.forgotten) + len(r.forgotTags); n > maxForgotten || len(r.forgetLog)-r.forgetHead > maxForgotten {
		t.Fatalf("%d invalidations remembered (%d records), over the bound %d", n, len(r.forgetLog)-r.forgetHead, maxForgotten)
	}
	if kept("b", before) {
		t.Error("a value begun before the floor was kept")
	}
	if !kept("b", time.Now()) {
		t.Error("a value begun after the floor was not kept")
	}
	r.check(t)
}

// TestReserveForgetModel checks the rule of PutSince over generated
// histories: loads of a few keys (some of hash tag t or u) begin and end
// in any order, with invalidations of keys and tags between, and at
// times a burst of invalidations of other keys past maxForgotten. The
// reserve never keeps a value whose load began before an invalidation of
// its key or tag (safety); while no burst has run, it keeps every other
// one (no value is lost for nothing). Each history prints its seed on
// failure.
func TestReserveForgetModel(t *testing.T) {
	for seed := range uint64(300) {
		if msg := forgetHistory(seed); msg != "" {
			t.Fatalf("seed %d: %s", seed, msg)
		}
	}
}

func forgetHistory(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0xf0))
	r := NewReserve(1000, 1<<24)
	keys := []string{"a", "b", "{t}a", "{t}b", "x{u}"}
	tagOf := map[string]string{"{t}a": "t", "{t}b": "t", "x{u}": "u"}
	lastForget := map[string]time.Time{} // key or "tag:"+tag
	type load struct {
		key   string
		since time.Time
	}
	var running []load
	burst := false
	for step := range 60 {
		switch op := rng.IntN(10); {
		case op < 4:
			running = append(running, load{keys[rng.IntN(len(keys))], time.Now()})
		case op < 7 && len(running) > 0:
			i := rng.IntN(len(running))
			l := running[i]
			running = append(running[:i], running[i+1:]...)
			v := []byte(fmt.Sprint(step))
			r.PutSince(Kept{Key: l.key, Name: "n:" + l.key, Value: v, FreshUntil: time.Now().Add(time.Hour),
				StaleUntil: time.Now().Add(time.Hour), Base: time.Now()}, l.since)
			k, ok := r.Get(l.key)
			dropped := !lastForget[l.key].Before(l.since)
			if tg, ok := tagOf[l.key]; ok && !lastForget["tag:"+tg].Before(l.since) {
				dropped = true
			}
			if ok && string(k.Value) == string(v) && dropped {
				return fmt.Sprintf("step %d: kept %q of a load begun before its invalidation", step, l.key)
			}
			if !burst && !dropped && (!ok || string(k.Value) != string(v)) {
				return fmt.Sprintf("step %d: did not keep %q, its load begun after every invalidation", step, l.key)
			}
		case op < 9:
			k := keys[rng.IntN(len(keys))]
			r.Forget(k)
			lastForget[k] = time.Now()
			if _, ok := r.Get(k); ok {
				return fmt.Sprintf("step %d: Forget left %q", step, k)
			}
		case rng.IntN(8) == 0:
			burst = true
			for i := range maxForgotten + rng.IntN(50) {
				r.Forget(fmt.Sprintf("filler%d-%d", step, i))
			}
		default:
			tg := []string{"t", "u"}[rng.IntN(2)]
			r.ForgetTag(tg)
			lastForget["tag:"+tg] = time.Now()
		}
	}
	return ""
}
