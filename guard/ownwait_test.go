package guard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestOwnWaitTimeout: a call that joins a wait another call of its
// process began earlier waits its own WaitTimeout before ErrWaitTimeout,
// as the docs say, not what is left of the other call's. (It got the
// error with the first call: 200ms into a wait of 600ms.)
func TestOwnWaitTimeout(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		const wait = 600 * time.Millisecond
		o := Options{Namespace: redistest.Key(t) + ":", WaitTimeout: wait, WaitTimeoutPolicy: ReturnError}
		holder, waiter := newGroup(t, rdb, o), newGroup(t, rdb, o)
		ctx := ctxT(t)
		started, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		go func() {
			_, _ = holder.Do(ctx, "k", func(context.Context) ([]byte, error) {
				close(started)
				<-release // stuck past every wait below
				return []byte("v"), nil
			})
		}()
		<-started
		first := make(chan error, 1)
		go func() {
			_, err := waiter.Do(ctx, "k", nil2Loader(t))
			first <- err
		}()
		// The second call begins two thirds into the first one's wait
		// (a pace: if the first has not begun waiting yet, the second
		// leads and the first joins it, which the check covers as well).
		time.Sleep(wait * 2 / 3)
		begin := time.Now()
		_, err := waiter.Do(ctx, "k", nil2Loader(t))
		took := time.Since(begin)
		if !errors.Is(err, ErrWaitTimeout) {
			t.Errorf("the second call: %v, want ErrWaitTimeout", err)
		}
		if took < wait {
			t.Errorf("the second call got its error after %v, want its own WaitTimeout (%v) at least", took, wait)
		}
		if err := <-first; !errors.Is(err, ErrWaitTimeout) {
			t.Errorf("the first call: %v, want ErrWaitTimeout", err)
		}
	})
}
