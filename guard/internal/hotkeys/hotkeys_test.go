package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
)

// TestExactBelowCapacity: with no more distinct keys than counters, every
// count is exact and no key has an error.
func TestExactBelowCapacity(t *testing.T) {
	s := New(8)
	want := map[string]uint64{"a": 5, "b": 3, "c": 9, "d": 1}
	for k, n := range want {
		for range n {
			s.Add(k)
		}
	}
	got := s.Top(nil, 10)
	if len(got) != len(want) {
		t.Fatalf("Top holds %d keys, want %d: %v", len(got), len(want), got)
	}
	for _, c := range got {
		if c.Count != want[c.Key] || c.Err != 0 {
			t.Errorf("%s: count %d err %d, want %d and 0", c.Key, c.Count, c.Err, want[c.Key])
		}
	}
	if got[0].Key != "c" || got[1].Key != "a" || got[2].Key != "b" || got[3].Key != "d" {
		t.Errorf("order %v, want c a b d", got)
	}
	if got, want := s.Total(), uint64(18); got != want {
		t.Errorf("Total = %d, want %d", got, want)
	}
}

// TestGuarantee checks Space-Saving's bounds on skewed streams much wider
// than the sketch: every key added more than n/k times is held, and a
// held key's count is at least its true count and at most that plus its
// error.
func TestGuarantee(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			const k, n = 16, 20000
			z := rand.NewZipf(r, 1.1, 1, 5000)
			s := New(k)
			truth := map[string]uint64{}
			keys := make([]string, 5001)
			for i := range keys {
				keys[i] = "key:" + strconv.Itoa(i)
			}
			for range n {
				key := keys[z.Uint64()]
				truth[key]++
				s.Add(key)
			}
			held := map[string]Counted{}
			for _, c := range s.Top(nil, k) {
				held[c.Key] = c
				if tr := truth[c.Key]; c.Count < tr || c.Count-c.Err > tr {
					t.Errorf("%s: count %d err %d, true %d", c.Key, c.Count, c.Err, tr)
				}
			}
			for key, tr := range truth {
				if _, ok := held[key]; tr > n/k && !ok {
					t.Errorf("%s added %d times (> n/k = %d) is not held", key, tr, n/k)
				}
			}
		})
	}
}

// TestIndexUnderChurn replaces counters many times over, in a small
// index where probe sequences wrap, and checks after each add that every
// held key is found and that the heap and slots agree.
func TestIndexUnderChurn(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	s := New(5)
	for i := range 20000 {
		s.Add("k" + strconv.Itoa(r.IntN(40)))
		if i%97 != 0 {
			continue
		}
		for j, v := range s.slots {
			if got, ok := s.find(v.key, v.hash); !ok || int(got) != j {
				t.Fatalf("add %d: slot %d (%q) found at %d, %v", i, j, v.key, got, ok)
			}
			if int(s.heap[v.at]) != j {
				t.Fatalf("add %d: slot %d at heap %d, which holds %d", i, j, v.at, s.heap[v.at])
			}
		}
		for j := 1; j < len(s.heap); j++ {
			if s.less(j, (j-1)/2) {
				t.Fatalf("add %d: heap order broken at %d", i, j)
			}
		}
		used := 0
		for _, e := range s.index {
			if e != 0 {
				used++
			}
		}
		if used != len(s.slots) {
			t.Fatalf("add %d: %d index entries for %d slots", i, used, len(s.slots))
		}
	}
}

// TestWeighted: AddN counts weights, the bounds hold with them.
func TestWeighted(t *testing.T) {
	s := New(2)
	s.AddN("a", 10)
	s.AddN("b", 3)
	s.AddN("c", 2) // takes b's counter: 3 + 2, error 3
	s.AddN("a", 5)
	got := s.Top(nil, 2)
	want := []Counted{{Key: "a", Count: 15}, {Key: "c", Count: 5, Err: 3}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || s.Total() != 20 {
		t.Fatalf("Top = %v, Total %d; want %v, 20", got, s.Total(), want)
	}
}

// TestDrain: Drain returns the window's top and total, then the sketch
// starts empty.
func TestDrain(t *testing.T) {
	s := New(4)
	for range 3 {
		s.Add("x")
	}
	s.Add("y")
	top, total := s.Drain(nil, 1)
	if len(top) != 1 || top[0].Key != "x" || top[0].Count != 3 || total != 4 {
		t.Fatalf("Drain = %v, %d; want [x 3], 4", top, total)
	}
	if got := s.Top(nil, 4); len(got) != 0 || s.Total() != 0 {
		t.Fatalf("after Drain: Top %v, Total %d; want empty", got, s.Total())
	}
	s.Add("z")
	if got := s.Top(nil, 4); len(got) != 1 || got[0] != (Counted{Key: "z", Count: 1}) {
		t.Fatalf("after Drain and one add: %v", got)
	}
}

// TestAddAllocatesNothing, counted and evicting alike.
func TestAddAllocatesNothing(t *testing.T) {
	s := New(8)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	i := 0
	if n := testing.AllocsPerRun(10000, func() {
		s.Add(keys[i%len(keys)])
		i++
	}); n != 0 {
		t.Errorf("Add allocates %v times per call, want 0", n)
	}
}

// TestConcurrent adds from several goroutines (run with -race): the
// total is exact.
func TestConcurrent(t *testing.T) {
	s := New(16)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				s.Add("k" + strconv.Itoa((g*i)%50))
			}
		})
	}
	wg.Wait()
	if got, want := s.Total(), uint64(20000); got != want {
		t.Fatalf("Total = %d, want %d", got, want)
	}
}

func BenchmarkAdd(b *testing.B) {
	s := New(128)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.2, 1, uint64(len(keys)-1))
	seq := make([]string, 4096)
	for i := range seq {
		seq[i] = keys[z.Uint64()]
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(seq[i&4095])
		i++
	}
}
