package tier

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

// Per-key tracking. Redis reports a change of a key to this node only if
// the node read the key on a connection with tracking on (redirected to
// its report connection), and only once: so what a change costs Redis
// follows the nodes that hold a copy of it, not the fleet. A copy is kept
// after such a tracked read found the entry it copies (the read is where
// tracking begins: a change after it is reported; one before it, found by
// comparing the entry). One reader connection per master, per report
// connection, its reads pipelined.

// keepReq is a copy waiting for its tracked read.
type keepReq struct {
	key, name   string
	tk          Ticket
	e           entry.Entry
	until, base int64 // nanotimes
	stale       bool
	cost        int // what the copy costs the tier, counted in queued
}

// maxTrackBatch bounds the reads of one pipeline of a reader.
const maxTrackBatch = 256

// track queues r for its tracked read on the reader of r's master; a copy
// whose read cannot be queued (no reader yet, the queue full, or the
// copies queued already cost half of Bytes) is not kept. The queue holds
// each copy's value: bounded by count alone, a reader slower than the
// reads (a stalled path to Redis) held up to 1,280 values of up to
// Bytes/8 each beside the tier, 250 MB and more for a tier of 4 MiB.
func (c *coherence) track(r keepReq) {
	t := c.trackerOf(r.name)
	if t == nil {
		return
	}
	queued := int64(r.cost)
	if all := c.all.Load(); all != nil {
		for _, o := range *all {
			queued += o.queued.Load()
		}
	}
	if queued > int64(c.tier.maxBytes/2) {
		return
	}
	t.queued.Add(int64(r.cost))
	select {
	case t.keeps <- r:
	default:
		t.queued.Add(-int64(r.cost))
	}
}

// trackerOf returns the tracker of the master of the entry named name.
func (c *coherence) trackerOf(name string) *tracker {
	addr := ""
	if c.cc != nil {
		n, err := c.cc.MasterForKey(context.Background(), name)
		if err != nil {
			return nil
		}
		addr = n.Options().Addr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trackers[addr]
}

// readTracked runs t's tracked reads on reader until done: the copies
// queued are kept once their reads found their entries unchanged.
func (c *coherence) readTracked(t *tracker, reader *redis.Client, done <-chan struct{}) {
	batch := make([]keepReq, 0, maxTrackBatch)
	defer func() {
		// The copies still queued go: their reads would be on another
		// connection, after more changes.
		for {
			select {
			case r := <-t.keeps:
				t.queued.Add(-int64(r.cost))
			default:
				return
			}
		}
	}()
	for {
		batch = batch[:0]
		select {
		case <-done:
			return
		case r := <-t.keeps:
			batch = append(batch, r)
		}
	more:
		for len(batch) < maxTrackBatch {
			select {
			case r := <-t.keeps:
				batch = append(batch, r)
			default:
				break more
			}
		}
		c.readBatch(t, reader, batch)
		for i := range batch {
			t.queued.Add(-int64(batch[i].cost))
			batch[i] = keepReq{} // its value is not held until the next batch
		}
	}
}

// readBatch reads the entries' headers of batch (and their tags'
// invalidation times) on the tracked reader in one pipeline, and keeps
// the copies whose entries are as they were read. A GET of each entry
// had cost Redis every copy's value twice.
func (c *coherence) readBatch(t *tracker, reader *redis.Client, batch []keepReq) {
	ctx, cancel := context.WithTimeout(context.Background(), c.rt)
	defer cancel()
	sent := nanotime()
	pipe := reader.Pipeline()
	gets := make([]*redis.StringCmd, len(batch))
	tinvs := make([]*redis.StringCmd, len(batch))
	for i, r := range batch {
		// The header alone tells the version (and begins the tracking):
		// the value was read already, by the read that offered the copy.
		gets[i] = pipe.GetRange(ctx, r.name, 0, entry.MaxHeaderLen-1)
		if b := tagBase(c.prefix, r.name); len(b) < len(r.name) {
			tinvs[i] = pipe.Get(ctx, b+":tinv")
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	if gets[0].Err() == nil {
		// A reply: the reader was alive when the reads were sent, and
		// the copies kept below depend on it since.
		storeMax(&t.readerAt, sent)
	}
	for i, r := range batch {
		raw, err := gets[i].Bytes()
		if err != nil {
			continue
		}
		e, err := entry.Decode(raw)
		if err != nil || e.Fence != r.e.Fence || e.Written != r.e.Written {
			continue // changed since it was read: not kept
		}
		if tinvs[i] != nil && tagInvalidated(&e, tinvs[i]) {
			continue
		}
		c.tier.keepNow(r.key, r.name, r.tk, &r.e, r.until, r.base, r.stale)
	}
}

// tagInvalidated reports whether the entry e was written before its tag's
// last invalidation, whose time (µs) cmd read: the rule of guard_read.lua.
func tagInvalidated(e *entry.Entry, cmd *redis.StringCmd) bool {
	s, err := cmd.Result()
	if err == redis.Nil {
		return false
	}
	t, perr := strconv.ParseInt(s, 10, 64)
	return err != nil || perr != nil || e.Fence < t || (e.Written+1)*1000 <= t
}

// readerOptions are the options of a tracked reader on the node o
// reaches: its reads are tracked, their reports sent to the report
// connection whose client id is id; dialed is told of each connection.
func readerOptions(o *redis.Options, id int64, dialed func(net.Conn)) *redis.Options {
	dial := o.Dialer
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	ro := &redis.Options{
		Network: o.Network, Addr: o.Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := dial(ctx, network, addr)
			if err == nil {
				dialed(cn)
			}
			return cn, err
		},
		Username: o.Username, Password: o.Password,
		// Its reads are the entries of the Group's client: in its
		// database (tracking itself is by name, whatever the database).
		DB:                           o.DB,
		CredentialsProvider:          o.CredentialsProvider,
		CredentialsProviderContext:   o.CredentialsProviderContext,
		StreamingCredentialsProvider: o.StreamingCredentialsProvider,
		TLSConfig:                    o.TLSConfig, DialTimeout: o.DialTimeout,
		ClientName: o.ClientName,
		// One connection, kept: another would track nothing read on it.
		Protocol: 2, PoolSize: 1, MaxRetries: -1, ContextTimeoutEnabled: true, ConnMaxIdleTime: -1,
		PipelinePoolSize: -1, // pipelines on that one connection too
		DialerRetries:    1,  // as the report connection's (trackerOptions)
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id).Err()
		},
	}
	return ro
}

// readerDialed returns the dial hook of t's reader: a second connection
// means the first was lost, and with it the tracking of the keys read on
// it; the tier flushes, so that no copy whose change Redis would not
// report is served. The connection's socket is kept for checkReader.
func (c *coherence) readerDialed(t *tracker) func(net.Conn) {
	var n atomic.Int64
	return func(cn net.Conn) {
		if n.Add(1) > 1 {
			c.tier.Flush()
		}
		rc := rawConn(cn)
		t.readerBlind.Store(rc == nil || !tcpInfoWorks)
		t.reader.Store(rc)
	}
}

// checkReader looks at t's tracked reader's connection, at each barrier
// while the tier is used: a CLIENT KILL, a timeout or an output-buffer
// limit on Redis's side ends the tracking of every key read on it, and a
// reader with nothing to read would only notice at its next read, while
// the copies it vouched for are served. A barrier therefore counts no
// later than the reader was last known alive (readerProof), so a copy
// goes within LocalLag of the reader's loss.
//
// A TCP socket on Linux is asked whether it is still established: if so,
// it was alive now; if not, the tier flushes. Any other (a Unix socket, a
// dialer that wraps the connection, another OS) cannot be: a CLIENT ID is
// sent on the reader instead, beside the barrier, and its reply proves it
// alive when it was sent (as does any tracked read's); an error flushes.
// A lost reader had been seen only at its next dial, and a node serving
// only hits never dialled: its copies outlived their changes until
// LocalTTL.
func (c *coherence) checkReader(t *tracker) {
	if !t.readerBlind.Load() {
		rc := t.reader.Load()
		if rc == nil {
			return // no connection yet, or its loss was seen
		}
		if _, ok := bytesReceived(*rc); !ok {
			if t.reader.CompareAndSwap(rc, nil) {
				c.tier.Flush()
			}
			return
		}
		storeMax(&t.readerAt, nanotime())
		return
	}
	r := t.readerClient.Load()
	if r == nil || !t.readerProbing.CompareAndSwap(false, true) {
		return
	}
	c.goTracker(func() {
		defer t.readerProbing.Store(false)
		ctx, cancel := context.WithTimeout(t.life, c.rt)
		defer cancel()
		sent := nanotime()
		if err := r.Do(ctx, "CLIENT", "ID").Err(); err != nil {
			if t.life.Err() == nil {
				c.tier.Flush()
			}
			return
		}
		storeMax(&t.readerAt, sent)
		t.bar.slow(nanotime() - sent)
	})
}

// readerProof is the limit of t's barriers (barriers.confirmed): when its
// tracked reader was last known alive; 0 (none) for a tier that tracks
// every change (no reader), or before the reader read anything (no copy
// depends on it yet).
func (c *coherence) readerProof(t *tracker) int64 {
	if !c.perKey {
		return 0
	}
	return t.readerAt.Load()
}

// storeMax stores v in a unless a holds more.
func storeMax(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// rawConn returns the socket of cn for TCP_INFO, through TLS; nil when
// there is none.
func rawConn(cn net.Conn) *syscall.RawConn {
	if nc, ok := cn.(interface{ NetConn() net.Conn }); ok {
		cn = nc.NetConn()
	}
	tc, ok := cn.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return &rc
}
