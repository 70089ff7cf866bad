package bench

import (
	"context"
	"errors"
	"math/bits"
	"net"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// histogram counts durations in µs, in buckets an eighth of an octave wide
// (12 % apart): small, and merged by adding.
type histogram struct {
	Counts []int64
}

const histBuckets = 8 + 61*8

func bucketOf(us int64) int {
	if us < 8 {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - 1
	return 8 + (e-3)*8 + int(us>>(e-3))&7
}

// lowerBound is the smallest µs of bucket i.
func lowerBound(i int) int64 {
	if i < 8 {
		return int64(i)
	}
	e, sub := (i-8)/8+3, (i-8)%8
	return int64(8+sub) << (e - 3)
}

func (h *histogram) addN(d time.Duration, n int64) {
	if h.Counts == nil {
		h.Counts = make([]int64, histBuckets)
	}
	h.Counts[bucketOf(d.Microseconds())] += n
}

func (h *histogram) add(d time.Duration) { h.addN(d, 1) }

func (h *histogram) merge(o *histogram) {
	for i, c := range o.Counts {
		if c != 0 {
			h.addN(time.Duration(lowerBound(i))*time.Microsecond, c)
		}
	}
}

func (h *histogram) total() int64 {
	var t int64
	for _, c := range h.Counts {
		t += c
	}
	return t
}

// quantile returns the q-quantile (the lower bound of its bucket).
func (h *histogram) quantile(q float64) time.Duration {
	t := h.total()
	if t == 0 {
		return 0
	}
	want, seen := int64(q*float64(t-1))+1, int64(0)
	for i, c := range h.Counts {
		if seen += c; seen >= want {
			return time.Duration(lowerBound(i)) * time.Microsecond
		}
	}
	return 0
}

// errKind sorts a Redis error: a timeout, or anything else.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}

// tracer times a node's Redis commands (a go-redis hook) and watches its
// connections' reads: when one times out, it looks whether a reply sat in
// the socket already (a read whose deadline passed while its goroutine
// waited to run).
type tracer struct {
	n *satNode

	mu sync.Mutex
	r  traceReport
}

// traceReport is what the tracer saw in the measured window.
type traceReport struct {
	Commands, Timeouts int64
	OK, TimedOut       histogram // durations of commands, µs
	// ReadTimeouts: socket reads that ended with a timeout; WithReply: of
	// those, the ones that left bytes of a reply in the socket.
	ReadTimeouts, WithReply int64
	// Late: how long after its deadline a timed-out command returned.
	Late histogram
}

func newTracer(n *satNode) *tracer { return &tracer{n: n} }

func (t *tracer) report() traceReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.r
}

func (t *tracer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &tracedConn{Conn: c, t: t}, nil
}

type tracedConn struct {
	net.Conn
	t *tracer
}

func (c *tracedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && errKind(err) == "timeout" && c.t.n.measuring.Load() {
		pending := pendingBytes(c.Conn)
		c.t.mu.Lock()
		c.t.r.ReadTimeouts++
		if pending {
			c.t.r.WithReply++
		}
		c.t.mu.Unlock()
	}
	return n, err
}

func (t *tracer) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *tracer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		t.done(ctx, start, err, 1)
		return err
	}
}

func (t *tracer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		t.done(ctx, start, err, len(cmds))
		return err
	}
}

func (t *tracer) done(ctx context.Context, start time.Time, err error, n int) {
	if !t.n.measuring.Load() {
		return
	}
	end := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.r.Commands += int64(n)
	if err != nil && errKind(err) == "timeout" {
		t.r.Timeouts += int64(n)
		t.r.TimedOut.add(end.Sub(start))
		if dl, ok := ctx.Deadline(); ok {
			t.r.Late.add(max(end.Sub(dl), 0))
		}
		return
	}
	if err == nil || errors.Is(err, redis.Nil) {
		t.r.OK.add(end.Sub(start))
	}
}
