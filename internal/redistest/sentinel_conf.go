package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// sentinelConf is what a Sentinel process monitors, written to its
// configuration file at its first start (Sentinel rewrites that file as it
// learns, so a restarted Sentinel keeps what it knew).
type sentinelConf struct {
	name            string
	masterPort      int
	quorum          int
	parallelSyncs   int
	downAfter       time.Duration
	failoverTimeout time.Duration
}

// sentinelArgs returns the command line of a Sentinel: the same binary as
// the data nodes (redis-server --sentinel), so that STAMPEDE_REDIS_SERVER
// chooses both.
func (s *Server) sentinelArgs() []string {
	return []string{
		filepath.Join(s.Dir, sentinelConfName), "--sentinel",
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", logName,
	}
}

// sentinelDebug are SENTINEL DEBUG settings (Redis 7.0+, Valkey) applied at
// every start of a Sentinel: it reads its instances' INFO every 500ms
// instead of every 10s, and sends its hello messages (how Sentinels find
// each other and spread a new configuration) every 500ms instead of every
// 2s. So a rejoined replica, a demoted master or another Sentinel is known
// in about a second. The failover path itself is Sentinel's own:
// down-after-milliseconds, votes, and a promoted replica's INFO read every
// second.
var sentinelDebug = []any{"SENTINEL", "DEBUG", "INFO-PERIOD", 500, "PUBLISH-PERIOD", 500}

func (s *Server) applySentinelDebug() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	admins := newAdmins()
	defer admins.close()
	if err := admins.get(s).Do(ctx, sentinelDebug...).Err(); err != nil {
		return fmt.Errorf("%v: %w", sentinelDebug, err)
	}
	return nil
}

func (s *Server) writeSentinelConf() error {
	path := filepath.Join(s.Dir, sentinelConfName)
	if _, err := os.Stat(path); err == nil {
		return nil // a restart: keep what this Sentinel learned
	}
	c := s.cfg.sentinel
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s %[6]d\n",
		c.name, c.masterPort, c.quorum,
		c.downAfter.Milliseconds(), c.failoverTimeout.Milliseconds(), c.parallelSyncs)
	return os.WriteFile(path, []byte(conf), 0o644)
}
