package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from its Addr to an upstream server on
// loopback, and can delay, stall or cut what the server sends back: the
// faults of a slow, stalled or broken path between one client and Redis,
// its other connections untouched. Its methods are safe for concurrent
// use; it closes with its test.
type Proxy struct {
	// Addr is where clients connect (127.0.0.1:port).
	Addr     string
	upstream string
	ln       net.Listener

	mu      sync.Mutex
	delay   time.Duration // each chunk from the server is held this long
	stalled bool          // nothing from the server is delivered
	changed chan struct{} // closed and replaced when delay or stall change
	conns   map[*proxied]struct{}
	closed  bool
	refuse  bool       // REDIRECT turned into an option Redis refuses
	watches []ranWatch // Ran's, not yet sent by a client
	wg      sync.WaitGroup
	dialed  atomic.Int64 // connections accepted and joined to the server
}

// ranWatch is one Ran: pattern, and the channel closed when the server
// answered it.
type ranWatch struct {
	pattern []byte
	done    chan struct{}
}

// proxied is one connection through the proxy.
type proxied struct {
	client, server net.Conn
	ran            []ranWatch // sent to the server here, not answered yet (p.mu)
}

// NewProxy starts a proxy to upstream (a loopback host:port), stopped
// when t ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), upstream: upstream, ln: ln,
		changed: make(chan struct{}), conns: map[*proxied]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Delay holds every chunk the server sends for d before the client gets
// it (in order); 0 delivers at once.
func (p *Proxy) Delay(d time.Duration) { p.set(func() { p.delay = d }) }

// Stall holds everything the server sends until Resume.
func (p *Proxy) Stall() { p.set(func() { p.stalled = true }) }

// Resume delivers what Stall held, and what comes after.
func (p *Proxy) Resume() { p.set(func() { p.stalled = false }) }

// RefuseRedirect makes the server refuse CLIENT TRACKING ... REDIRECT, as
// Redis Cloud and Redis Software do: the proxy turns the option into one
// the server does not know (same length, so the command stays whole), and
// the server answers an error.
func (p *Proxy) RefuseRedirect() { p.set(func() { p.refuse = true }) }

// Ran returns a channel closed once a client has sent bytes holding
// pattern (within one read from its connection) and the server has then
// sent its first bytes back on that connection, before the proxy delays
// or stalls them. With nothing else outstanding on the connection, those
// are the command's reply: the server has run it. How a test knows a
// command ran before something it does next, without a sleep.
func (p *Proxy) Ran(pattern []byte) <-chan struct{} {
	w := ranWatch{pattern: bytes.Clone(pattern), done: make(chan struct{})}
	p.mu.Lock()
	p.watches = append(p.watches, w)
	p.mu.Unlock()
	return w.done
}

// passed moves the Ran watches whose pattern b holds to c's, now that b
// went to the server on c.
func (p *Proxy) passed(c *proxied, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.watches[:0]
	for _, w := range p.watches {
		if bytes.Contains(b, w.pattern) {
			c.ran = append(c.ran, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(p.watches[len(kept):])
	p.watches = kept
}

// answered closes c's Ran watches: the server sent bytes back on c.
func (p *Proxy) answered(c *proxied) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range c.ran {
		close(w.done)
	}
	c.ran = nil
}

// Dialed returns how many connections the proxy has accepted and joined
// to the server so far.
func (p *Proxy) Dialed() int64 { return p.dialed.Load() }

// Cut resets every connection through the proxy (new ones are accepted).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a FIN
		}
		_ = c.client.Close()
		_ = c.server.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &proxied{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.dialed.Add(1)
		p.mu.Unlock()
		go p.up(c)
		go p.down(c)
	}
}

// up copies what the client sends, untouched.
func (p *Proxy) up(c *proxied) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			refuse := p.refuse
			p.mu.Unlock()
			if refuse {
				copy(buf[:n], bytes.ReplaceAll(buf[:n], []byte("REDIRECT"), []byte("REDIRECX")))
			}
			p.passed(c, buf[:n]) // before: the reply may come at once
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = c.server.Close()
}

// chunk is what the server sent at one time.
type chunk struct {
	b  []byte
	at time.Time
}

// down copies what the server sends, held as the proxy's faults say.
func (p *Proxy) down(c *proxied) {
	defer p.wg.Done()
	q := make(chan chunk, 1<<16)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := c.server.Read(buf)
			if n > 0 {
				p.answered(c)
				q <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range q {
		if !p.hold(ch.at) {
			break
		}
		if _, err := c.client.Write(ch.b); err != nil {
			break
		}
	}
	_ = c.client.Close()
}

// hold waits until a chunk received at may be delivered; false when the
// proxy closed.
func (p *Proxy) hold(at time.Time) bool {
	for {
		p.mu.Lock()
		delay, stalled, changed, closed := p.delay, p.stalled, p.changed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		wait := time.Until(at.Add(delay))
		if !stalled && wait <= 0 {
			return true
		}
		var t *time.Timer
		var timer <-chan time.Time
		if !stalled {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-changed:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
