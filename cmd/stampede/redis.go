package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
)

// conn are the flags every subcommand takes to reach the fleet's Redis.
type conn struct {
	redis     string
	namespace string
	timeout   time.Duration
}

func (c *conn) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&c.redis, "redis", "localhost:6379",
		"Redis: host:port, a redis:// or rediss:// URL (user, password, db; ?addr=host:port more cluster seeds),\n"+
			"or a cluster's seed addresses separated by commas (a cluster is found from one seed too); also REDIS_ADDR")
	fs.StringVar(&c.namespace, "namespace", "stampede:", "the Namespace of the Groups (guard.Options.Namespace)")
	fs.DurationVar(&c.timeout, "timeout", timeout, "bound of each Redis call (guard.Options.RedisTimeout)")
}

// client connects to Redis and checks it answers (PING, which writes
// nothing), as a cluster client when the server is in cluster mode.
func (c *conn) client(ctx context.Context) (redis.UniversalClient, error) {
	if c.timeout <= 0 {
		return nil, usagef("-timeout %v: want a positive duration", c.timeout)
	}
	if c.namespace == "" {
		// guard.New would take the default, and watch's tracking the
		// whole keyspace: say which.
		return nil, usagef(`-namespace "": want the Groups' Namespace (the default is "stampede:")`)
	}
	rdb, err := c.dial()
	if err != nil {
		return nil, usagef("-redis %q: %v", redact(c.redis), err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", redact(c.redis), err)
	}
	if single, ok := rdb.(*redis.Client); ok && sentinelMode(pctx, single) {
		_ = rdb.Close()
		return nil, usagef("-redis %s is a Sentinel: give the address of the master it names (SENTINEL GET-MASTER-ADDR-BY-NAME)", redact(c.redis))
	}
	if single, ok := rdb.(*redis.Client); ok && clusterMode(pctx, single) {
		// One seed of a cluster: follow its map.
		o := single.Options()
		_ = single.Close()
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{o.Addr}, Username: o.Username,
			Password: o.Password, TLSConfig: o.TLSConfig, ContextTimeoutEnabled: true,
			ReadTimeout: c.timeout, WriteTimeout: c.timeout})
		if err := cc.Ping(pctx).Err(); err != nil {
			_ = cc.Close()
			return nil, fmt.Errorf("cannot reach the cluster of %s: %w", redact(c.redis), err)
		}
		return cc, nil
	}
	return rdb, nil
}

func (c *conn) dial() (redis.UniversalClient, error) {
	s := strings.TrimSpace(c.redis)
	switch {
	case s == "":
		return nil, errors.New("empty")
	case strings.Contains(s, "://") && strings.Contains(s, "addr="):
		o, err := redis.ParseClusterURL(s)
		if err != nil {
			return nil, urlError(err)
		}
		o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout = true, c.timeout, c.timeout
		return redis.NewClusterClient(o), nil
	case strings.Contains(s, "://"):
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, urlError(err)
		}
		o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout = true, c.timeout, c.timeout
		return redis.NewClient(o), nil
	case strings.Contains(s, ","):
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(s, ","),
			ContextTimeoutEnabled: true, ReadTimeout: c.timeout, WriteTimeout: c.timeout}), nil
	}
	return redis.NewClient(&redis.Options{Addr: s, ContextTimeoutEnabled: true,
		ReadTimeout: c.timeout, WriteTimeout: c.timeout}), nil
}

// proxyClient is client for the proxy, which must start during a Redis
// outage (a restart, a failover, a pod rescheduled while Redis is down):
// when Redis does not answer, it returns a client of the address's form
// anyway, and the proxy serves without Redis meanwhile (each proxy loading
// on its own, as in any outage). A Redis that cannot be configured (a
// malformed address, a name that does not resolve, a refused password)
// still fails. down is the error of the first try, nil when Redis
// answered; back then reports, once Redis answers, a client that can no
// longer serve it (a single server's client for a cluster node, which
// only a restart of the proxy mends).
func (c *conn) proxyClient(ctx context.Context) (rdb redis.UniversalClient, down error, back <-chan error, err error) {
	rdb, err = c.client(ctx)
	if err == nil || !unreachable(err) {
		return rdb, nil, nil, err
	}
	down = err
	if rdb, err = c.dial(); err != nil {
		return nil, nil, nil, usagef("-redis %q: %v", redact(c.redis), err)
	}
	if single, ok := rdb.(*redis.Client); ok {
		ch := make(chan error, 1)
		go c.watchMode(ctx, single, ch)
		back = ch
	}
	return rdb, down, back, nil
}

// watchMode pings rdb once a second until it answers, then sends an error
// on back if the server runs in cluster mode.
func (c *conn) watchMode(ctx context.Context, rdb *redis.Client, back chan<- error) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		err := rdb.Ping(pctx).Err()
		cluster := err == nil && clusterMode(pctx, rdb)
		cancel()
		switch {
		case err != nil:
			continue
		case cluster:
			back <- fmt.Errorf("the Redis at %s answers now as a node of a cluster, which this proxy, started while it was down, cannot follow: restart it", redact(c.redis))
		}
		return
	}
}

// unreachable reports whether err, from client, says that Redis did not
// answer (refused, reset, timed out: an outage) rather than that it is
// misconfigured (a name that does not resolve, a refused password, TLS).
func unreachable(err error) bool {
	var dns *net.DNSError
	var reply redis.Error
	if errors.As(err, &dns) || errors.As(err, &reply) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, io.EOF) || (errors.As(err, &ne) && ne.Timeout())
}

// clusterMode reports whether the server rdb reaches runs in cluster mode
// (INFO cluster, a read).
func clusterMode(ctx context.Context, rdb *redis.Client) bool {
	info, err := rdb.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// urlError is the error of a Redis URL that did not parse, without the
// URL (net/url's errors quote it, password and all, or a piece of it).
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New("not a valid URL (a password's '#', '%', '/', '?', '@' or space must be percent-encoded)")
	}
	return err
}

// sentinelMode reports whether the server rdb reaches is a Sentinel,
// which holds no keys (INFO server, a read).
func sentinelMode(ctx context.Context, rdb *redis.Client) bool {
	info, err := rdb.Info(ctx, "server").Result()
	return err == nil && strings.Contains(info, "redis_mode:sentinel")
}

// redact hides the password of a Redis URL. One that does not parse (a
// password with an unescaped '#', '%' or space) hides all between the
// scheme and its last '@'.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i {
			return s[:i+3] + "xxxxx" + s[j:]
		}
		return s
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// reader returns a Group of the Namespace that only reads what the fleet
// keeps, and invalidates when told: no in-process tier, no hot keys of
// its own, nothing written by its making.
func (c *conn) reader(rdb redis.UniversalClient) (*guard.Group, error) {
	g, err := guard.New(rdb, guard.Options{Namespace: c.namespace, RedisTimeout: c.timeout,
		LocalEntries: guard.Disabled, HotKeys: guard.Disabled})
	if err != nil {
		return nil, usagef("%v", err)
	}
	return g, nil
}

// open is client and reader: what the read subcommands start with. stop
// closes both.
func (c *conn) open(ctx context.Context) (g *guard.Group, rdb redis.UniversalClient, stop func(), err error) {
	rdb, err = c.client(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	g, err = c.reader(rdb)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	return g, rdb, func() { _ = g.Close(); _ = rdb.Close() }, nil
}
