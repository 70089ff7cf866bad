package guard

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestAbandonedLoaderTimesOut: a loader abandoned after LoadTimeout is
// told its ctx ran out (DeadlineExceeded), never Canceled as if its caller
// had left. After a stall of the process both the ctx's deadline and the
// guard's wait had passed, and the guard's deferred cancel could run
// first: a loader that told the two apart (the proxy logs an upstream
// timeout, and says nothing of a cancelled call) took a timeout for a
// cancel. The stalls here are goroutines that keep every P busy.
func TestAbandonedLoaderTimesOut(t *testing.T) {
	g := newGroup(t, redistest.Shared(t).Client(t), Options{LoadTimeout: time.Millisecond})
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range runtime.GOMAXPROCS(0) * 2 {
		busy.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					for i := 0; i < 1e5; i++ {
					}
				}
			}
		})
	}
	defer func() { close(stop); busy.Wait() }()
	var canceled atomic.Int64
	const runs = 30
	for range runs {
		told := make(chan error, 1)
		o := g.runLoader(context.Background(), "k", func(ctx context.Context) ([]byte, error) {
			<-ctx.Done()
			time.Sleep(5 * time.Millisecond) // past the grace: abandoned
			told <- ctx.Err()
			return nil, ctx.Err()
		}, nil)
		if !errors.Is(o.err, ErrLoadTimeout) {
			t.Fatalf("outcome %v, want ErrLoadTimeout", o.err)
		}
		if err := <-told; errors.Is(err, context.Canceled) {
			canceled.Add(1)
		}
	}
	if canceled.Load() > 0 {
		t.Errorf("%d of %d abandoned loaders were told Canceled; want DeadlineExceeded", canceled.Load(), runs)
	}
}
