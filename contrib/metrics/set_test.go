package metrics

import (
	"fmt"
	"sync"
	"testing"
)

// identity is a KeyLabel that labels a key by itself (tests only: a real
// KeyLabel returns one of a few fixed names).
func identity(key string) string { return key }

func TestSeriesBindsOncePerLabelThenOther(t *testing.T) {
	binds := map[string]int{}
	var mu sync.Mutex
	s := NewSeries(Labels{KeyLabel: identity, MaxKeyLabels: 2}, func(l string) *string {
		mu.Lock()
		binds[l]++
		mu.Unlock()
		return &l
	})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() { s.Get(fmt.Sprint("k", i%4)) })
	}
	wg.Wait()
	// Two labels got their own series, the rest share OtherKey; each bound once.
	own, other := 0, 0
	for l, n := range binds {
		if n != 1 {
			t.Errorf("label %q bound %d times, want 1", l, n)
		}
		if l == OtherKey {
			other++
		} else {
			own++
		}
	}
	if own != 2 || other != 1 {
		t.Fatalf("bound %v, want 2 labels of their own and %q", binds, OtherKey)
	}
	if got := *s.Get("\xff"); got != OtherKey {
		t.Fatalf("a label past MaxKeyLabels got %q, want %q", got, OtherKey)
	}
}

func TestSeriesCleansLabels(t *testing.T) {
	s := NewSeries(Labels{KeyLabel: identity}, func(l string) *string { return &l })
	if got := *s.Get("a\xffb"); got != "a\uFFFDb" {
		t.Fatalf("bound %q, want the invalid byte replaced", got)
	}
	if Valid("ok") != "ok" {
		t.Fatal("Valid changed a valid string")
	}
}

// TestSeriesWithoutKeyLabel: every key shares one series, bound once with
// the label "", by Prime or at the first event.
func TestSeriesWithoutKeyLabel(t *testing.T) {
	binds := 0
	s := NewSeries(Labels{}, func(l string) *string { binds++; return &l })
	p := s.Prime()
	if p == nil || *p != "" {
		t.Fatalf("Prime = %v, want the series of label \"\"", p)
	}
	for _, k := range []string{"a", "b", ""} {
		if got := s.Get(k); got != p {
			t.Errorf("Get(%q) = %p, want the one series %p", k, got, p)
		}
	}
	if binds != 1 {
		t.Errorf("bound %d times, want 1", binds)
	}
	if got := NewSeries(Labels{KeyLabel: identity}, func(l string) *string { return &l }).Prime(); got != nil {
		t.Errorf("Prime with a KeyLabel = %q, want nil (each label binds at its first event)", *got)
	}
}

func TestGetDoesNotAllocateOnceBound(t *testing.T) {
	for name, l := range map[string]Labels{"KeyLabel": {KeyLabel: identity}, "none": {}} {
		s := NewSeries(l, func(string) *int { return new(int) })
		s.Get("k")
		if n := testing.AllocsPerRun(100, func() { s.Get("k") }); n != 0 {
			t.Errorf("%s: Get of a bound label allocates %v times, want 0", name, n)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	got := Labels{Group: "a\xff"}.WithDefaults()
	if got.Group != "a\uFFFD" || got.MaxKeyLabels != 100 {
		t.Errorf("WithDefaults = %+v, want Group cleaned and MaxKeyLabels 100", got)
	}
	if got := (Labels{}).WithDefaults().Group; got != "default" {
		t.Errorf("default Group %q, want %q", got, "default")
	}
}

// TestSeriesInvalidLabelsShareTheirCleanSlot: raw labels that clean to the
// same value share one series and take one MaxKeyLabels slot, so a few
// invalid bytes do not push later labels into OtherKey.
func TestSeriesInvalidLabelsShareTheirCleanSlot(t *testing.T) {
	binds := map[string]int{}
	s := NewSeries(Labels{KeyLabel: identity, MaxKeyLabels: 3}, func(l string) *string {
		binds[l]++
		return &l
	})
	a := s.Get("\x80")
	for _, k := range []string{"\x81", "\x82", "\uFFFD"} {
		if got := s.Get(k); got != a {
			t.Errorf("Get(%q) = %q, want the series of %q", k, *got, "\uFFFD")
		}
	}
	if got := *s.Get("user"); got != "user" {
		t.Errorf("Get(%q) = %q after 3 keys labelled %q; bound %v", "user", got, "\uFFFD", binds)
	}
	if binds["\uFFFD"] != 1 {
		t.Errorf("bound %v, want %q once", binds, "\uFFFD")
	}
}
