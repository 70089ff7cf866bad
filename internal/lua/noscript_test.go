package lua

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestPipelineNoScriptLoadsOncePerServer: after the servers' script caches
// are emptied (a restart, a failover, SCRIPT FLUSH), a pipeline of many
// calls sends the script's text once per server, not once per call, and
// every call still gets its own answer. Each call sent as EVAL had cost a
// fresh Redis the whole text per key: 16 KiB for a fill, 16 MB for a batch
// of 1,000 keys.
func TestPipelineNoScriptLoadsOncePerServer(t *testing.T) {
	// A script as large as the fill script, its text mostly a comment.
	s := redis.NewScript("-- " + strings.Repeat("x", 16<<10) + "\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])")
	const calls = 300
	run := func(t *testing.T, rdb redis.UniversalClient, servers []*redis.Client) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		prefix := redistest.Key(t)
		var cs []Call
		for i := range calls {
			cs = append(cs, Call{Keys: []string{fmt.Sprintf("%s:%d", prefix, i)}, Args: []any{i + 1}})
		}
		for round := range 2 {
			for _, srv := range servers {
				if err := srv.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if err := srv.ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			gets := []string{cs[0].Keys[0]}
			getCmds, cmds := Pipeline(ctx, rdb, gets, s, cs)
			for i, c := range cmds {
				got, err := c.Int64()
				if want := int64((i + 1) * (round + 1)); err != nil || got != want {
					t.Fatalf("round %d: call %d answered %d, %v; want %d", round, i, got, err, want)
				}
			}
			// The GET went out before the calls: a round's own call is
			// not seen, the last round's is.
			if v, err := getCmds[0].Int64(); (round == 0 && err != redis.Nil) || (round > 0 && (err != nil || v != int64(round))) {
				t.Fatalf("round %d: the GET sent first answered %d, %v; want the previous round's %d", round, v, err, round)
			}
			var evals, used int64
			for _, srv := range servers {
				e := commandCalls(t, ctx, srv, "eval")
				if e > 1 {
					t.Errorf("round %d: server %s ran EVAL %d times; want the script's text sent once", round, srv.Options().Addr, e)
				}
				evals += e
				if commandCalls(t, ctx, srv, "evalsha")+e > 0 {
					used++
				}
			}
			if evals != used {
				t.Errorf("round %d: %d EVAL over the %d servers the calls went to; want one each", round, evals, used)
			}
		}
	}
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t).Client(t)
		run(t, srv, []*redis.Client{srv})
	})
	t.Run("ring", func(t *testing.T) {
		a, b := redistest.Start(t), redistest.Start(t)
		ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
		t.Cleanup(func() { _ = ring.Close() })
		run(t, ring, []*redis.Client{a.Client(t), b.Client(t)})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.SharedCluster(t)
		var masters []*redis.Client
		for _, m := range c.Masters {
			masters = append(masters, m.Client(t))
		}
		run(t, c.Client(t), masters)
	})
}

// commandCalls is how many times srv ran cmd since its statistics were
// reset, from INFO commandstats.
func commandCalls(t *testing.T, ctx context.Context, srv *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := srv.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 0
}
