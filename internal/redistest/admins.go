package redistest

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// admins holds one small, non-retrying client per node, for setup and
// inspection.
type admins struct{ m map[*Server]*redis.Client }

func newAdmins() *admins { return &admins{m: make(map[*Server]*redis.Client)} }

func (a *admins) get(s *Server) *redis.Client {
	c, ok := a.m[s]
	if !ok {
		c = redis.NewClient(&redis.Options{
			Addr:            s.Addr,
			Password:        s.cfg.password,
			TLSConfig:       s.TLSConfig(), // nil for cluster nodes, set for WithTLS servers
			Protocol:        2,
			MaxRetries:      -1,
			DialTimeout:     time.Second,
			DialerRetries:   1,
			ReadTimeout:     2 * time.Second,
			WriteTimeout:    2 * time.Second,
			PoolSize:        1,
			DisableIdentity: true,
		})
		a.m[s] = c
	}
	return c
}

func (a *admins) close() {
	for _, c := range a.m {
		_ = c.Close()
	}
}
