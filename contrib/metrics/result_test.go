package metrics

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard"
)

// TestLoadResult: the guard's answers (not found, Revalidated, Pass) are
// told from failures (NoStore and Private included).
func TestLoadResult(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, ResultOK},
		{guard.ErrNotFound, ResultNotFound},
		{fmt.Errorf("row: %w", guard.ErrNotFound), ResultNotFound},
		{errors.Join(boom, guard.ErrNotFound), ResultNotFound},
		{guard.Revalidated(nil, 0), ResultRevalidated},
		{guard.Revalidated([]byte("head"), 3), ResultRevalidated},
		{guard.Pass(nil, time.Minute), ResultPass},
		{guard.Pass(boom, time.Second), ResultPass},
		{fmt.Errorf("handler: %w", guard.Pass(boom, time.Second)), ResultPass},
		{guard.Private(boom), ResultError},
		{guard.Private(guard.ErrNotFound), ResultNotFound},
		{guard.NoStore(boom), ResultError},
		{boom, ResultError},
		{&guard.BackoffError{Key: "k", Cause: "x"}, ResultError},
	} {
		if got := LoadResult(tt.err); got != tt.want {
			t.Errorf("LoadResult(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	pass := guard.Pass(boom, time.Second)
	if n := testing.AllocsPerRun(100, func() { LoadResult(pass) }); n != 0 {
		t.Errorf("LoadResult allocates %v times, want 0", n)
	}
}
