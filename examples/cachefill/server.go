package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// server is the Redis the nodes share: an embedded miniredis or a real
// server.
type server struct {
	addr string
	mini *miniredis.Miniredis // nil for a real server
	run  string               // per-run key prefix component
}

// openServer starts an embedded miniredis on 127.0.0.1 when addr is empty,
// or checks that the Redis server at addr answers.
func openServer(addr string) (*server, error) {
	s := &server{addr: addr, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if addr == "" {
		m := miniredis.NewMiniRedis()
		// Expire keys as the wall clock advances, as a real Redis does
		// (miniredis otherwise only expires keys on FastForward).
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("starting miniredis: %w", err)
		}
		s.mini, s.addr = m, m.Addr()
		return s, nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return s, nil
}

func (s *server) describe() string {
	if s.mini != nil {
		return "embedded miniredis " + s.addr
	}
	return "redis " + s.addr
}

// prefix is the key namespace of one strategy in this run, so strategies
// (and runs) never share entries.
func (s *server) prefix(strategy string) string {
	return "cachefill:" + s.run + ":" + strategy + ":"
}

// client returns a new client for one simulated node. It honours context
// deadlines (go-redis otherwise waits out its own 3s ReadTimeout), so the
// guard's RedisTimeout bounds its calls and the end of a run cuts requests
// off at once.
func (s *server) client(poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: poolSize, ContextTimeoutEnabled: true})
}

// clear deletes the keys under prefix: all of them on the embedded server,
// by SCAN on a real one.
func (s *server) clear(prefix string) error {
	if s.mini != nil {
		s.mini.FlushAll()
		return nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	it := rdb.Scan(ctx, 0, prefix+"*", 500).Iterator()
	var batch []string
	for it.Next(ctx) {
		batch = append(batch, it.Val())
		if len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}

func (s *server) close() {
	if s.mini != nil {
		s.mini.Close()
	}
}
