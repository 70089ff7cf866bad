package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
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
			return nil, err
		}
		o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout = true, c.timeout, c.timeout
		return redis.NewClusterClient(o), nil
	case strings.Contains(s, "://"):
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, err
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

// clusterMode reports whether the server rdb reaches runs in cluster mode
// (INFO cluster, a read).
func clusterMode(ctx context.Context, rdb *redis.Client) bool {
	info, err := rdb.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// redact hides the password of a Redis URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
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
