package security_test

import (
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestTLS runs the guard's full cycle and every lock operation against a
// server that speaks TLS only (its plain-text port is closed), with the
// server authenticated by its certificate, and with client certificates
// too.
func TestTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redistest.Option
	}{
		{"server-cert", redistest.WithTLS()},
		{"client-cert", redistest.WithTLSClientAuth()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tc.opt, redistest.WithPassword("tls-test-pw"))
			admin := srv.Client(t)
			// With no plain-text listener, every byte below went over TLS.
			if got, err := admin.ConfigGet(t.Context(), "port").Result(); err != nil || got["port"] != "0" {
				t.Fatalf("CONFIG GET port = %v, %v; want 0 (TLS only)", got, err)
			}
			rdbA, rdbB := srv.Client(t), srv.Client(t)
			if o := rdbA.Options(); o.TLSConfig == nil || !o.ContextTimeoutEnabled {
				t.Fatalf("client: TLSConfig %v, ContextTimeoutEnabled %v", o.TLSConfig, o.ContextTimeoutEnabled)
			}
			t.Run("guard", func(t *testing.T) { guardCycle(t, rdbA, rdbB, redistest.Key(t)) })
			t.Run("lock", func(t *testing.T) { lockCycle(t, rdbA, rdbB, admin, redistest.Key(t)) })
		})
	}
}
