package metrics

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestTierState(t *testing.T) {
	for _, tt := range []struct {
		on   bool
		why  string
		want string
	}{
		{true, "", "on"},
		{false, "lost", "lost"},
		{false, "", "off"},
		{false, "new\xff", "new\uFFFD"},
	} {
		if got := TierState(tt.on, tt.why); got != tt.want {
			t.Errorf("TierState(%v, %q) = %q, want %q", tt.on, tt.why, got, tt.want)
		}
	}
}

func values(s *StateSet) []string {
	var got []string
	s.Each(func(st string, v int64) { got = append(got, fmt.Sprintf("%s=%d", st, v)) })
	return got
}

func TestStateSet(t *testing.T) {
	s := StateSet{Known: []string{"on", "lost"}}
	steps := []struct {
		set  string
		want []string
	}{
		{"", []string{"on=0", "lost=0"}}, // before the first Set
		{"lost", []string{"on=0", "lost=1"}},
		{"on", []string{"on=1", "lost=0"}},
		{"drained", []string{"on=0", "lost=0", "drained=1"}}, // unknown: reported after the known
		{"lost", []string{"on=0", "lost=1"}},
	}
	for _, st := range steps {
		if st.set != "" {
			s.Set(st.set)
		}
		if got := values(&s); !slices.Equal(got, st.want) {
			t.Errorf("after Set(%q): %v, want %v", st.set, got, st.want)
		}
	}
}

// Whatever the interleaving of Set and Each, one state is at 1.
func TestStateSetOneCurrent(t *testing.T) {
	s := StateSet{Known: TierStates()}
	s.Set("connecting")
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			s.Set(tierStates[i%len(tierStates)])
		}
	})
	for range 2000 {
		ones := 0
		s.Each(func(_ string, v int64) { ones += int(v) })
		if ones != 1 {
			t.Fatalf("%d states at 1, want 1", ones)
		}
	}
	wg.Wait()
}
