package labels

import (
	"fmt"
	"sync"
	"testing"
)

func TestSetBindsOncePerLabelThenOther(t *testing.T) {
	binds := map[string]int{}
	var mu sync.Mutex
	ss := Set[string]{Max: 2, Other: "other", Bind: func(l string) *string {
		mu.Lock()
		binds[l]++
		mu.Unlock()
		return &l
	}}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss.Get(fmt.Sprint("k", i%4))
		}()
	}
	wg.Wait()
	// Two labels got their own series, the rest share "other"; each bound once.
	own, other := 0, 0
	for l, n := range binds {
		if n != 1 {
			t.Errorf("label %q bound %d times, want 1", l, n)
		}
		if l == "other" {
			other++
		} else {
			own++
		}
	}
	if own != 2 || other != 1 {
		t.Fatalf("bound %v, want 2 labels of their own and other", binds)
	}
	if got := *ss.Get("\xff"); got != "other" {
		t.Fatalf("a label past Max got %q, want other", got)
	}
}

func TestSetCleansLabels(t *testing.T) {
	ss := Set[string]{Max: 4, Other: "other", Bind: func(l string) *string { return &l }}
	if got := *ss.Get("a\xffb"); got != "a\uFFFDb" {
		t.Fatalf("bound %q, want the invalid byte replaced", got)
	}
	if Valid("ok") != "ok" {
		t.Fatal("Valid changed a valid string")
	}
}

func TestGetDoesNotAllocateOnceBound(t *testing.T) {
	ss := Set[int]{Max: 4, Other: "other", Bind: func(string) *int { return new(int) }}
	ss.Get("k")
	if n := testing.AllocsPerRun(100, func() { ss.Get("k") }); n != 0 {
		t.Fatalf("Get of a bound label allocates %v times, want 0", n)
	}
}
