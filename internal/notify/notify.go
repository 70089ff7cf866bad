// Package notify gives each stampede client one Redis Pub/Sub channel of its
// own and routes the messages that arrive on it to local waiters.
//
// A waiter that may be woken from another process (a lock waiter, a guard
// caller waiting for a fill) registers an id with its client's Hub and hands
// the Hub's Channel to Redis (a lock's wait queue, a key's waiter set). The
// script that releases the lock or fills the key publishes the id to that
// channel. A Hub subscribes once, for its whole life, so waiting costs no
// SUBSCRIBE/UNSUBSCRIBE round trips per wait, and every waiter of a client
// shares one connection.
//
// Messages can be lost (a reconnect, a server restart): waiters always keep a
// fallback timer.
package notify

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/scriptarg"
)

// ErrClosed is returned by Ready after Close.
var ErrClosed = errors.New("notify: hub closed")

// Hub is one client's subscription. The zero value is not usable; use New.
type Hub struct {
	rdb     redis.UniversalClient
	channel string

	mu      sync.Mutex
	ps      *redis.PubSub
	ready   chan struct{} // closed when Redis confirmed the SUBSCRIBE
	refused chan struct{} // closed when Redis refused it; refusal says why
	refusal error
	done    chan struct{} // closed when the dispatcher exits
	quit    chan struct{} // closed by Close
	closed  bool
	waiters map[string]map[chan struct{}]struct{}
}

// NewChannel returns prefix followed by a random id: a channel name no other
// client uses.
func NewChannel(prefix string) string {
	return prefix + scriptarg.RandomID(12)
}

// New returns a Hub that will listen on channel through rdb. Nothing is sent
// to Redis until the first Ready.
func New(rdb redis.UniversalClient, channel string) *Hub {
	return &Hub{
		rdb: rdb, channel: channel,
		ready: make(chan struct{}), refused: make(chan struct{}), quit: make(chan struct{}),
		waiters: map[string]map[chan struct{}]struct{}{},
	}
}

// Channel returns the channel this Hub listens on.
func (h *Hub) Channel() string { return h.channel }

// Subscribed reports, without blocking, whether Redis has confirmed the
// subscription. Once true it stays true while the Hub is open: after a
// reconnect go-redis subscribes again by itself, a connection gone silent
// is replaced (healthEvery), and messages sent in between are lost, which
// waiters' fallback timers cover.
func (h *Hub) Subscribed() bool {
	select {
	case <-h.ready:
		return true
	default:
		return false
	}
}

// Ready subscribes on first use and waits until Redis confirmed the
// subscription or ctx ends. It returns ctx's error in the latter case; the
// subscription then still completes in the background. When Redis refused
// the subscription (an ACL user without access to the channel: NOPERM),
// Ready returns Redis's reply, a redis.Error, at once.
func (h *Hub) Ready(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if h.ps == nil {
		// Subscribe sends SUBSCRIBE at once when it can; when Redis is down
		// the dispatcher's Receive redials and subscribes later.
		h.ps = h.rdb.Subscribe(context.WithoutCancel(ctx), h.channel)
		h.done = make(chan struct{})
		go h.dispatch(h.ps, h.done)
	}
	h.mu.Unlock()
	select {
	case <-h.ready:
		return nil
	case <-h.quit:
		return ErrClosed
	case <-h.refused:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.refusal
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Register routes messages carrying id to wake: each one does a
// non-blocking send, so wake should have a buffer of 1. Several channels may
// wait on one id. The returned func unregisters and must be called.
func (h *Hub) Register(id string, wake chan struct{}) (unregister func()) {
	h.mu.Lock()
	set := h.waiters[id]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.waiters[id] = set
	}
	set[wake] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(set, wake)
		if len(h.waiters[id]) == 0 {
			delete(h.waiters, id)
		}
	}
}

// Waiters returns how many wake channels are registered for id.
func (h *Hub) Waiters(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiters[id])
}

// healthEvery is how long the dispatcher waits for anything on its
// connection before it asks Redis (SUBSCRIBE again); a second wait as long
// with no answer makes it subscribe again on a new connection. A server that
// froze, or a path that went silent without closing (a partition, a
// cluster master left frozen after its replica took over), would
// otherwise hold the subscription forever: no message, no error.
var healthEvery = 3 * time.Second

func (h *Hub) dispatch(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := time.Millisecond
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), healthEvery)
		if err != nil {
			h.mu.Lock()
			closed := h.closed
			h.mu.Unlock()
			if closed || errors.Is(err, redis.ErrClosed) {
				return
			}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				if !pinged {
					// Asked by subscribing again, which Redis confirms
					// and which changes nothing: the one command the
					// Hub's users are granted anyway (PING may not be:
					// docs/security.md).
					pinged = true
					_ = ps.Subscribe(context.Background(), h.channel) // the next receive tells
					continue
				}
				pinged = false
				if ps = h.resubscribe(ps); ps == nil {
					return
				}
				continue
			}
			if rerr := redis.Error(nil); errors.As(err, &rerr) && !h.Subscribed() {
				// Redis answered the SUBSCRIBE with an error: no retry on
				// this connection can succeed, so say so to Ready.
				h.mu.Lock()
				if h.refusal == nil {
					h.refusal = err
					close(h.refused)
				}
				h.mu.Unlock()
			}
			// Connection trouble: go-redis redials and subscribes again on
			// the next Receive. Back off so a dead server costs no CPU.
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
		backoff, pinged = time.Millisecond, false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && !h.Subscribed() {
				close(h.ready)
			}
		case *redis.Message:
			h.mu.Lock()
			for w := range h.waiters[m.Payload] {
				select {
				case w <- struct{}{}:
				default:
				}
			}
			h.mu.Unlock()
		}
	}
}

// resubscribe replaces old, whose connection stopped answering, with a new
// subscription (for a cluster, on the node that serves the channel's slot
// now), and returns it; nil once the Hub is closed.
func (h *Hub) resubscribe(old *redis.PubSub) *redis.PubSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	_ = old.Close()
	h.ps = h.rdb.Subscribe(context.Background(), h.channel)
	return h.ps
}

// Close stops the dispatcher and closes the Pub/Sub connection. Ready fails
// with ErrClosed afterwards.
func (h *Hub) Close() error {
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
