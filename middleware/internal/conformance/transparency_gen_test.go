package conformance

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// hungInput is the fuzz input on which FuzzTransparency hung: not JSON, so
// its bytes choose a generated case, and they ran out inside IntN(6).
const hungInput = `{"behaviour":{"Base":{"status":204,"pieces"000\u0001\u0002binary","piece-59 "],"flush":true},"Trigger":{"status":204}},"requests":[{"ims":true},{},{"trigger":true}]}`

// TestGenCaseEndsPastInput generates a case from inputs that run out
// early: the hung one, each of its prefixes, none, and zeros. A draw past
// the end of the input must end.
func TestGenCaseEndsPastInput(t *testing.T) {
	inputs := [][]byte{[]byte(hungInput), nil, bytes.Repeat([]byte{0}, 64)}
	for i := range len(hungInput) {
		inputs = append(inputs, []byte(hungInput[:i]))
	}
	var at atomic.Int64 // the input being generated from
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, in := range inputs {
			at.Store(int64(i))
			tc := genCase(rand.New(&byteSource{b: in}))
			if n := len(tc.Requests); n < 2 || n > 5 {
				t.Errorf("input %q: %d requests, want 2 to 5", in, n)
			}
		}
	}()
	// A deadline, not a measure: a case takes microseconds, and a draw
	// that never ends never does.
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("genCase on input %q still drawing after 30s", inputs[at.Load()])
	}
}

// TestByteSourcePastInput holds the source to all ones past the input's
// end: the one value IntN never draws again, whatever n.
func TestByteSourcePastInput(t *testing.T) {
	s := &byteSource{b: []byte{1, 2, 3}}
	if got, want := s.Uint64(), uint64(0x010203ffffffffff); got != want {
		t.Errorf("the draw across the end: got %#x, want %#x", got, want)
	}
	if got, want := s.Uint64(), ^uint64(0); got != want {
		t.Errorf("a draw past the end: got %#x, want %#x", got, want)
	}
}

// TestSanitizeBounds holds a case read from outside to what the harness
// can run: a MaxBody the middleware is built with, and a few pieces.
func TestSanitizeBounds(t *testing.T) {
	tc := TCase{Requests: []tRequest{{}}, MaxBody: 90_000_000}
	tc.Behaviour.Base.Pieces = slices.Repeat([]string{"~1048576"}, 100)
	tc.sanitize()
	if got, want := tc.MaxBody, tMaxValueBytes; got != want {
		t.Errorf("MaxBody %d, want %d", got, want)
	}
	if got, want := len(tc.Behaviour.Base.Pieces), 8; got != want {
		t.Errorf("%d pieces, want %d", got, want)
	}
}
