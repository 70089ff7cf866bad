package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// hub multiplexes every waiter of one Client (per Redis node) onto a single
// Pub/Sub connection. Waiters register a wake channel under (channel, id);
// a release publishes the id of the one waiter it reserved the lock for.
//
// A channel is subscribed while at least one waiter of this Client needs it.
// register returns only once Redis confirmed the SUBSCRIBE (or the caller's
// deadline passed), so the caller's next acquire attempt cannot race a
// release it would otherwise miss.
type hub struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	ps      *redis.PubSub
	done    chan struct{} // closed when the dispatcher exits
	quit    chan struct{} // closed by close
	closed  bool
	chans   map[string]*subscription
	pending map[string][]chan struct{} // SUBSCRIBE confirmations, in send order
}

type subscription struct {
	ready   chan struct{}
	waiters map[*waiter]struct{}
}

type waiter struct {
	id   string
	wake chan struct{} // buffered(1); shared by the hubs of a Redlock client
}

func newHub(rdb redis.UniversalClient) *hub {
	return &hub{rdb: rdb, quit: make(chan struct{}), chans: map[string]*subscription{}, pending: map[string][]chan struct{}{}}
}

// register subscribes w to channel and waits for Redis to confirm it.
// The returned func unregisters w and must always be called.
func (h *hub) register(ctx context.Context, channel string, w *waiter) (func(), error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return func() {}, ErrClosed
	}
	if h.ps == nil {
		// The connection is dialled lazily by the first SUBSCRIBE.
		h.ps = h.rdb.Subscribe(context.WithoutCancel(ctx))
		h.done = make(chan struct{})
		go h.dispatch(h.ps, h.done)
	}
	sub := h.chans[channel]
	if sub == nil {
		sub = &subscription{ready: make(chan struct{}), waiters: map[*waiter]struct{}{}}
		h.pending[channel] = append(h.pending[channel], sub.ready)
		if err := h.ps.Subscribe(ctx, channel); err != nil {
			h.dropPending(channel, sub.ready)
			h.mu.Unlock()
			return func() {}, err
		}
		h.chans[channel] = sub
	}
	sub.waiters[w] = struct{}{}
	h.mu.Unlock()

	unregister := func() { h.unregister(channel, sub, w) }
	select {
	case <-sub.ready:
		return unregister, nil
	case <-ctx.Done():
		// No confirmation in time: the caller falls back to its timer.
		return unregister, nil
	}
}

func (h *hub) unregister(channel string, sub *subscription, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(sub.waiters, w)
	if len(sub.waiters) > 0 || h.chans[channel] != sub {
		return
	}
	delete(h.chans, channel)
	if h.closed || h.ps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = h.ps.Unsubscribe(ctx, channel) // best effort: a stray message is ignored
}

func (h *hub) dropPending(channel string, ready chan struct{}) {
	q := h.pending[channel]
	for i, c := range q {
		if c == ready {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(h.pending, channel)
	} else {
		h.pending[channel] = q
	}
}

func (h *hub) dispatch(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := time.Millisecond
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			h.mu.Lock()
			closed := h.closed
			h.mu.Unlock()
			if closed || errors.Is(err, redis.ErrClosed) {
				return
			}
			// Connection trouble: go-redis redials and resubscribes on the
			// next Receive. Back off so a dead server costs no CPU; waiters
			// meanwhile rely on their fallback timers.
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-h.quit:
				t.Stop()
				return
			}
			backoff = min(backoff*2, 500*time.Millisecond)
			continue
		}
		backoff = time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			h.mu.Lock()
			if q := h.pending[m.Channel]; len(q) > 0 {
				close(q[0])
				h.dropPending(m.Channel, q[0])
			}
			h.mu.Unlock()
		case *redis.Message:
			h.mu.Lock()
			if sub := h.chans[m.Channel]; sub != nil {
				for w := range sub.waiters {
					if w.id == m.Payload {
						select {
						case w.wake <- struct{}{}:
						default:
						}
					}
				}
			}
			h.mu.Unlock()
		}
	}
}

// close stops the dispatcher and closes the Pub/Sub connection.
func (h *hub) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.quit)
	ps, done := h.ps, h.done
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}
