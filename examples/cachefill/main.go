// Command cachefill shows what a cache stampede does to a slow origin, and
// what the guard does about it.
//
// It simulates a small fleet: -nodes service nodes, each with its own Redis
// client and its own in-process state (as separate processes would have),
// each running -clients concurrent clients. All of them read the same few hot
// keys (-keys, Zipf-skewed) that live in Redis in front of a slow origin, a
// fake database that sleeps -origin-latency per load and counts its loads.
// Each run starts cold (every client asks for the hot keys at the same
// instant) and then keeps the load up for -duration while the hot keys expire
// every -fresh, several times over.
//
// The same workload runs three times, each on its own empty key space:
//
//	naive         cache-aside with go-redis: GET; on a miss, load from the
//	              origin and SET with a TTL of -fresh.
//	singleflight  the same, with a golang.org/x/sync/singleflight.Group per
//	              node, so each node loads a missing key once at a time.
//	guard         the stampede guard (package guard): one load per key per
//	              refresh across the fleet; between -fresh and -fresh+-stale
//	              the previous value is served while one node refreshes it.
//
// Reading the table:
//
//	requests      answers the clients got within the run (calls cut off by
//	              the end of the run are not counted).
//	origin loads  calls that reached the origin. This is the stampede: with
//	              naive cache-aside every client that misses loads; with
//	              singleflight about one load per node per expiry; with the
//	              guard about one per key per expiry in the whole fleet.
//	stale         answers served from a value past its fresh time (only the
//	              guard serves stale values; that is why it has no latency
//	              spike when a hot key expires).
//	p50, p99      latency of one answer as a client saw it. A miss costs at
//	              least -origin-latency; waiting behind a stampede costs more.
//	errors        failed answers (including wrong values). Never fatal.
//
// With no flags the demo runs on an embedded miniredis. Give -redis
// host:port (or set REDIS_ADDR) to use a real Redis server instead; the demo
// uses its own key prefix there and deletes its keys when done. Judge
// latencies on a real server: miniredis runs each Lua script in a new
// interpreter under one global lock, so the guard's reads (one script each,
// where cache-aside sends a plain GET) are far slower there than on Redis
// and queue behind each other. Origin loads compare fine on either.
//
// The default run takes about 20 seconds (three strategies of -duration
// 6s). Progress goes to stderr: one line rewritten in place on a terminal,
// a plain line every 2 seconds otherwise (a file, a pipe, a CI log); the
// table goes to stdout. go-redis logs each failed dial itself; those lines
// are shown only with -v.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is the demo's settings, one field per flag.
type config struct {
	Nodes         int           // simulated service nodes
	Clients       int           // concurrent clients per node
	Keys          int           // hot keys
	Duration      time.Duration // run time of each strategy
	OriginLatency time.Duration // time of one origin load
	Fresh         time.Duration // how long a cached value is fresh (the TTL of cache-aside)
	Stale         time.Duration // how long after that the guard may serve it stale
	RedisAddr     string        // "" = embedded miniredis
	Verbose       bool          // go-redis's own log lines to stderr
}

func defaultConfig() config {
	return config{
		Nodes:         4,
		Clients:       32,
		Keys:          8,
		Duration:      6 * time.Second,
		OriginLatency: 50 * time.Millisecond,
		Fresh:         time.Second,
		Stale:         3 * time.Second,
		RedisAddr:     os.Getenv("REDIS_ADDR"),
	}
}

func (c config) validate() error {
	switch {
	case c.Nodes < 1 || c.Clients < 1 || c.Keys < 1:
		return errors.New("-nodes, -clients and -keys must be at least 1")
	case c.Duration <= 0 || c.Fresh <= 0:
		return errors.New("-duration and -fresh must be positive")
	case c.OriginLatency < 0 || c.Stale < 0:
		return errors.New("-origin-latency and -stale must not be negative")
	}
	return nil
}

// summary is the first line of -h: what the demo does.
const summary = "cachefill shows a cache stampede on a simulated fleet: naive cache-aside vs singleflight vs the guard."

// parseFlags reads the command line into a config; -h prints the summary,
// the usage and the flags to out.
func parseFlags(args []string, out io.Writer, onError flag.ErrorHandling) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("cachefill", onError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\n\nUsage: go run ./examples/cachefill [flags]\n\n"+
			"Runs the same workload three times, each for -duration (defaults: about 20s in all,\n"+
			"on an embedded miniredis), and prints a table: requests answered, origin loads,\n"+
			"stale answers, latency, errors. See the package documentation for how to read it.\n\nFlags:\n", summary)
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "simulated service nodes (each with its own Redis client and guard)")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients per node")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "hot keys (requests are Zipf-skewed over them)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "run time of each strategy")
	fs.DurationVar(&cfg.OriginLatency, "origin-latency", cfg.OriginLatency, "time of one origin load")
	fs.DurationVar(&cfg.Fresh, "fresh", cfg.Fresh, "how long a cached value is fresh (cache-aside TTL)")
	fs.DurationVar(&cfg.Stale, "stale", cfg.Stale, "how long after -fresh the guard serves a value stale while refreshing")
	fs.StringVar(&cfg.RedisAddr, "redis", cfg.RedisAddr, "host:port of a Redis server (default $REDIS_ADDR; empty: embedded miniredis)")
	fs.BoolVar(&cfg.Verbose, "v", cfg.Verbose, "show go-redis's own log lines (failed dials, pool messages) on stderr")
	err := fs.Parse(args)
	return cfg, err
}

func main() {
	cfg, _ := parseFlags(os.Args[1:], os.Stderr, flag.ExitOnError)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cachefill:", err)
		os.Exit(1)
	}
}

// redisLog takes go-redis's own log lines: a failed dial is logged by the
// connection pool on every attempt, which would break into the progress
// line and repeat what the demo's own error says. They go to w with -v,
// nowhere otherwise.
type redisLog struct{ w io.Writer }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	if l.w != nil {
		msg := strings.TrimPrefix(strings.TrimSuffix(fmt.Sprintf(format, v...), "\n"), "redis: ")
		fmt.Fprintln(l.w, "go-redis:", msg)
	}
}

// isTerminal reports whether w is a terminal (a character device), where
// the progress line can be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// run runs every strategy in turn with the same workload, writes progress to
// stderr and the result table to stdout.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	var rl redisLog
	if cfg.Verbose {
		rl.w = stderr
	}
	redis.SetLogger(rl)
	srv, err := openServer(cfg.RedisAddr)
	if err != nil {
		return err
	}
	defer srv.close()

	fmt.Fprintf(stdout, "cachefill: %d nodes x %d clients, %d hot keys, %v per strategy, origin %v per load, fresh %v, stale %v, on %s\n\n",
		cfg.Nodes, cfg.Clients, cfg.Keys, cfg.Duration, cfg.OriginLatency, cfg.Fresh, cfg.Stale, srv.describe())

	var results []result
	for _, s := range strategies {
		res, err := runStrategy(ctx, cfg, srv, s, stderr, isTerminal(stderr))
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		results = append(results, res)
	}
	writeTable(stdout, results)
	if srv.mini != nil {
		fmt.Fprintln(stdout, "\nnote: this ran on embedded miniredis, which runs Lua scripts (the guard's misses and\n"+
			"refreshes) far slower than Redis; compare latencies against a real server (-redis host:port).\n"+
			"Origin loads compare fine either way.")
	}
	return nil
}
