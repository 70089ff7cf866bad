package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

var watchCommand = command{
	name: "watch", args: "",
	summary: "Print fills, refreshes, invalidations and lease grants as they happen.\n\n" +
		"A line each, and each second's counts, until interrupted (Ctrl-C). Redis reports every change of a\n" +
		"name under the Namespace to a connection of watch's own (client tracking, BCAST PREFIX), whoever\n" +
		"made it; watch then reads the key (inspect's reads) to say what changed. It writes nothing.\n" +
		"On a cluster it listens to the masters it finds at start.",
	example: "stampede watch -redis localhost:6379 -namespace catalog:",
	setup: func(fs *flag.FlagSet) action {
		var c conn
		c.register(fs, 2*time.Second)
		maxLines := fs.Int("max-lines", 100, "the most event lines printed per second; the others are counted")
		return func(ctx context.Context, out io.Writer, args []string) error {
			if len(args) > 0 {
				return usagef("watch takes no arguments")
			}
			if *maxLines < 0 {
				return usagef("-max-lines %d: want 0 or more", *maxLines)
			}
			return watch(ctx, out, &c, *maxLines)
		}
	},
}

func watch(ctx context.Context, out io.Writer, c *conn, maxLines int) error {
	g, rdb, stop, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer stop()
	masters, err := masterOptions(ctx, rdb)
	if err != nil {
		return err
	}
	w := &watcher{g: g, rdb: rdb, timeout: c.timeout, out: out, maxLines: maxLines, counts: map[string]int{}, stale: map[string]bool{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	ready := make(chan error, len(masters))
	for _, o := range masters {
		wg.Go(func() { track(ctx, o, c.namespace, c.timeout, w, ready) })
	}
	for range masters {
		select {
		case err := <-ready:
			if err != nil {
				cancel()
				wg.Wait()
				return fmt.Errorf("client tracking refused, or not confirmed within -timeout: %w", err)
			}
		case <-ctx.Done():
			wg.Wait()
			return nil
		}
	}
	w.printf("watching %q on %d node(s); Ctrl-C stops\n", c.namespace, len(masters))
	if db := masters[0].DB; db != 0 {
		// Tracking reports a changed name, not its database.
		w.printf("note: Redis reports changes by name, whatever their database: changes of these names in databases other than %d show here too (as drops, mostly)\n", db)
	}
	wg.Go(func() { w.tick(ctx) })
	<-ctx.Done()
	wg.Wait()
	w.flush(time.Now())
	return nil
}

// masterOptions returns the options of each master rdb reaches.
func masterOptions(ctx context.Context, rdb redis.UniversalClient) ([]*redis.Options, error) {
	switch r := rdb.(type) {
	case *redis.Client:
		return []*redis.Options{r.Options()}, nil
	case *redis.ClusterClient:
		var mu sync.Mutex
		var all []*redis.Options
		err := r.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			all = append(all, n.Options())
			mu.Unlock()
			return nil
		})
		return all, err
	}
	return nil, fmt.Errorf("watch: unsupported client %T", rdb)
}

// track keeps a tracking connection to the master of o, reporting its
// reports to w, until ctx ends. The first subscription's outcome goes to
// ready (its confirmation awaited for timeout at most); after it, a lost
// connection is dialled again. A connection silent for healthEvery is
// probed (a SUBSCRIBE it already holds, confirmed): one that does not
// answer within timeout is lost, so that a frozen or cut Redis prints
// "lost" rather than looking like a quiet one.
func track(ctx context.Context, o *redis.Options, ns string, timeout time.Duration, w *watcher, ready chan<- error) {
	rdb := redis.NewClient(&redis.Options{
		Addr: o.Addr, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		Protocol: 2, PoolSize: 1, MaxRetries: -1, ContextTimeoutEnabled: true,
		DialTimeout: timeout, WriteTimeout: timeout,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			// RESP2: the reports go to this same connection, subscribed.
			id, err := cn.ClientID(ctx).Result()
			if err != nil {
				return err
			}
			return cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", ns).Err()
		},
	})
	defer rdb.Close()
	first, lost := true, false
	for ctx.Err() == nil {
		ps := rdb.Subscribe(ctx, invalidateChannel)
		// Closing the subscription is what ends a Receive for sure.
		unwatch := context.AfterFunc(ctx, func() { _ = ps.Close() })
		_, err := ps.ReceiveTimeout(ctx, timeout) // the confirmation, or why not
		if first {
			ready <- err
			first = false
			if err != nil {
				unwatch()
				_ = ps.Close()
				return
			}
		}
		if err == nil {
			if lost {
				w.event(time.Now(), "back", "", o.Addr+": listening")
				lost = false
			}
			err = listen(ctx, ps, timeout, w)
		}
		unwatch()
		_ = ps.Close()
		if ctx.Err() == nil {
			// A flush's report (go-redis cannot parse it), a lost or
			// silent connection: say so once, and listen again.
			if !lost {
				w.event(time.Now(), "lost", "", fmt.Sprintf("%s: %v; listening again", o.Addr, err))
				lost = true
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

const invalidateChannel = "__redis__:invalidate"

// healthEvery is how long a tracking connection may be silent before
// watch asks it whether it is still there.
const healthEvery = 5 * time.Second

// listen passes ps's reports to w until the connection is lost (the
// error) or silent past its probe.
func listen(ctx context.Context, ps *redis.PubSub, timeout time.Duration, w *watcher) error {
	probed := false
	for {
		wait := healthEvery
		if probed {
			wait = timeout
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout() && !probed:
			if err := ps.Subscribe(ctx, invalidateChannel); err != nil {
				return err
			}
			probed = true
			continue
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("no answer within %v", timeout)
		default:
			return err
		}
		probed = false
		if m, ok := msg.(*redis.Message); ok {
			names := m.PayloadSlice
			if m.Payload != "" {
				names = append(names, m.Payload)
			}
			w.changed(ctx, names)
		}
	}
}

// watcher turns reports of changed names into event lines and counts.
type watcher struct {
	g        *guard.Group
	rdb      redis.UniversalClient
	timeout  time.Duration
	out      io.Writer
	maxLines int

	mu     sync.Mutex
	counts map[string]int  // events by kind this second
	lines  int             // lines printed this second
	hidden int             // events not printed this second
	stale  map[string]bool // keys whose lease was granted over a value: their next fill is a refresh
}

func (w *watcher) printf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.out, format, args...)
}

// tick prints the counts of each second that had events.
func (w *watcher) tick(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.flush(now)
		}
	}
}

var eventKinds = []string{"fill", "refresh", "invalidate", "invalidate-tag", "lease", "backup", "drop", "foreign"}

// flush prints and resets the second's counts, if any.
func (w *watcher) flush(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.counts) == 0 {
		return
	}
	fmt.Fprintf(w.out, "-- %s", now.Format("15:04:05"))
	for _, k := range eventKinds {
		fmt.Fprintf(w.out, "  %s %d", k, w.counts[k])
	}
	if w.hidden > 0 {
		fmt.Fprintf(w.out, "  (%d not shown)", w.hidden)
	}
	fmt.Fprintln(w.out)
	clear(w.counts)
	w.lines, w.hidden = 0, 0
	if len(w.stale) > 10000 {
		clear(w.stale) // bounded: a refresh may then show as a fill
	}
}
