package lock

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newTestClient returns a lock Client on rdb, closed at the end of the test.
func newTestClient(t testing.TB, rdb redis.UniversalClient, opts Options) *Client {
	t.Helper()
	c := New(rdb, opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitClosed fails the test if ch is not closed within d.
func waitClosed(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
}

// overlapDetector fails when two holders are inside the critical section at
// once. Its counter is incremented non-atomically (load, yield, store): any
// overlap loses an update, which the final count reveals.
type overlapDetector struct {
	inside  atomic.Int32
	overlap atomic.Int32
	count   atomic.Int64
}

func (d *overlapDetector) enter() {
	if d.inside.Add(1) != 1 {
		d.overlap.Add(1)
	}
	v := d.count.Load()
	time.Sleep(50 * time.Microsecond) // widen the window an overlap would need
	d.count.Store(v + 1)
	d.inside.Add(-1)
}

// reentrantState reads a reentrant lock's hash: its owner and how many
// hold fields it has (live or not yet pruned).
func reentrantState(t testing.TB, rdb redis.UniversalClient, c *Client, key string) (owner string, holds int) {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), c.names(key).lock).Result()
	if err != nil {
		t.Fatal(err)
	}
	for f := range m {
		if strings.HasPrefix(f, "hold:") {
			holds++
		}
	}
	return m["owner"], holds
}

// replyDropper is a TCP proxy to a Redis server that, when armed, lets the
// next command through and swallows its reply, closing the connection (a
// reset after the command ran): the client sends the command again on a
// new connection.
type replyDropper struct {
	addr  string
	armed atomic.Bool
}

func newReplyDropper(t testing.TB, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Go(func() { _, _ = io.Copy(u, c); _ = u.Close() })
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 && p.armed.CompareAndSwap(true, false) {
						_ = u.Close()
						return
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							_ = u.Close()
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return p
}
