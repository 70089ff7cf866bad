package guard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestBackoffErrorNamesKeyAndCause: the ErrBackoff another node gets while
// a cold key backs off says which key, and what error started the
// back-off, so the log line behind a run of failures can be traced.
func TestBackoffErrorNamesKeyAndCause(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	a := newGroup(t, rdb, Options{ErrorBackoff: time.Minute})
	b := newGroup(t, rdb, Options{ErrorBackoff: time.Minute})
	key := redistest.Key(t)
	cause := errors.New("origin said 503: db pool exhausted")
	if _, err := a.Do(ctxT(t), key, func(context.Context) ([]byte, error) { return nil, cause }); !errors.Is(err, cause) {
		t.Fatalf("the failing load: %v; want its error", err)
	}
	_, err := b.Do(ctxT(t), key, nil2)
	if !errors.Is(err, ErrBackoff) {
		t.Fatalf("another node: %v; want ErrBackoff", err)
	}
	var be *BackoffError
	if !errors.As(err, &be) || be.Key != key || be.Cause != cause.Error() {
		t.Fatalf("back-off error %#v; want a *BackoffError with the key and the cause", err)
	}
	for _, want := range []string{key, cause.Error()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("back-off error %q does not name %q", err, want)
		}
	}
	_, err = b.GetMany(ctxT(t), []string{key}, func(context.Context, []string) (map[string][]byte, error) {
		return nil, errors.New("must not load")
	})
	if !errors.Is(err, ErrBackoff) || !strings.Contains(err.Error(), cause.Error()) {
		t.Fatalf("GetMany during the back-off: %v; want ErrBackoff naming the cause", err)
	}
}
