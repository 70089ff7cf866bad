package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// configGet returns one configuration parameter of the server behind rdb.
func configGet(t *testing.T, rdb *redis.Client, param string) string {
	t.Helper()
	got, err := rdb.ConfigGet(t.Context(), param).Result()
	if err != nil {
		t.Fatalf("CONFIG GET %s: %v", param, err)
	}
	return got[param]
}

func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, WithTLS())
	rdb := s.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	for param, want := range map[string]string{
		"port":             "0", // no plain-text listener at all
		"tls-port":         strconv.Itoa(s.Port),
		"tls-auth-clients": "no",
	} {
		if got := configGet(t, rdb, param); got != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got, want)
		}
	}

	c1, c2 := s.TLSConfig(), s.TLSConfig()
	if c1 == nil || c1 == c2 || c1.RootCAs == nil || len(c1.Certificates) != 0 {
		t.Fatalf("TLSConfig() = %p, %p: want distinct copies trusting the CA, without a client certificate", c1, c2)
	}

	plain := s.Client(t, failFast, func(o *redis.Options) { o.TLSConfig = nil })
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("PING in plain text on the TLS port succeeded")
	}

	// A client that trusts another CA must refuse the server.
	stranger := s.Client(t, failFast, func(o *redis.Options) {
		o.TLSConfig = &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "127.0.0.1"}
	})
	var verr *tls.CertificateVerificationError
	if err := stranger.Ping(ctx).Err(); !errors.As(err, &verr) {
		t.Errorf("PING trusting another CA: %v, want a certificate verification error", err)
	}

	// A client configured from the files, as a deployment would be.
	pemCA, err := os.ReadFile(s.TLSFile(CAFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemCA) {
		t.Fatalf("%s holds no certificate", CAFile)
	}
	fromFiles := s.Client(t, func(o *redis.Options) {
		o.TLSConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12} // name from the address
	})
	if err := fromFiles.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the CA file: %v", err)
	}
	for _, name := range []string{ServerCertFile, ServerKeyFile} {
		if _, err := os.Stat(s.TLSFile(name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if fi, err := os.Stat(s.TLSFile(ServerKeyFile)); err == nil && fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s has mode %v, want it private", ServerKeyFile, fi.Mode().Perm())
	}

	// The readiness probe speaks TLS too, and the certificates survive.
	s.Restart(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS after Restart: %v", err)
	}
}

func TestTLSClientAuth(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, WithTLSClientAuth(), WithPassword("s3cret"))
	rdb := s.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with a client certificate: %v", err)
	}
	if got := configGet(t, rdb, "tls-auth-clients"); got != "yes" {
		t.Errorf("tls-auth-clients = %q, want yes", got)
	}
	if conf := s.TLSConfig(); len(conf.Certificates) != 1 {
		t.Fatalf("TLSConfig carries %d client certificates, want 1", len(conf.Certificates))
	}

	anonymous := s.Client(t, failFast, func(o *redis.Options) { o.TLSConfig.Certificates = nil })
	if err := anonymous.Ping(ctx).Err(); err == nil {
		t.Error("PING without a client certificate succeeded")
	}

	pair, err := tls.LoadX509KeyPair(s.TLSFile(ClientCertFile), s.TLSFile(ClientKeyFile))
	if err != nil {
		t.Fatalf("client key pair from the files: %v", err)
	}
	fromFiles := s.Client(t, func(o *redis.Options) { o.TLSConfig.Certificates = []tls.Certificate{pair} })
	if err := fromFiles.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the client certificate files: %v", err)
	}

	s.Kill(t)
	s.Restart(t) // the probe presents the client certificate and authenticates
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestTLSMasters(t *testing.T) {
	t.Parallel()
	srvs := StartMasters(t, 2, WithTLS())
	for _, s := range srvs {
		if err := s.Client(t).Ping(t.Context()).Err(); err != nil {
			t.Errorf("%s: PING over TLS: %v", s.Addr, err)
		}
	}
	// Each server has a CA of its own: trusting one is not trusting all.
	other := srvs[0].Client(t, failFast, func(o *redis.Options) { o.Addr = srvs[1].Addr })
	if err := other.Ping(t.Context()).Err(); err == nil {
		t.Error("a client trusting one server's CA reached the other")
	}
}

func TestNoTLS(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if s.TLSConfig() != nil || s.TLSFile(CAFile) != "" {
		t.Errorf("plain-text server: TLSConfig() = %v, TLSFile = %q; want nil and empty", s.TLSConfig(), s.TLSFile(CAFile))
	}
}

func TestUsers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, WithPassword("admin-pw"),
		WithUser("reader", "r-pw", "~app:*", "+get", "+acl|whoami"))
	admin := s.Client(t)
	if err := admin.Set(ctx, "app:x", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	reader := s.UserClient(t, "reader")
	check := func(when string) {
		t.Helper()
		if who, err := reader.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "reader" {
			t.Errorf("%s: ACL WHOAMI = %q, %v; want reader", when, who, err)
		}
		if got, err := reader.Get(ctx, "app:x").Result(); err != nil || got != "v" {
			t.Errorf("%s: GET app:x = %q, %v", when, got, err)
		}
		if err := reader.Set(ctx, "app:x", "w", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: SET as reader: %v, want NOPERM", when, err)
		}
		if err := reader.Get(ctx, "other:x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: GET outside ~app:* as reader: %v, want NOPERM", when, err)
		}
	}
	check("at start")
	if who, err := admin.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "default" {
		t.Errorf("Client is %q (%v), want the default user", who, err)
	}

	// SetUser on the running server; a nopass user authenticates with
	// UserClient too.
	s.SetUser(t, "writer", "", "~app:*", "+set", "+get")
	writer := s.UserClient(t, "writer")
	if err := writer.Set(ctx, "app:x", "w", 0).Err(); err != nil {
		t.Fatalf("SET as writer: %v", err)
	}
	if err := admin.Set(ctx, "app:x", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// Users live in memory only: the server creates them again on restart.
	s.Kill(t)
	s.Restart(t)
	if err := admin.Set(ctx, "app:x", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	check("after Restart")
	if err := writer.Set(ctx, "app:y", "w", 0).Err(); err != nil {
		t.Errorf("SET as writer after Restart: %v", err)
	}

	// Redefining a user replaces its password and rules.
	s.SetUser(t, "reader", "r-pw2", "~app:*", "+get")
	stale := s.Client(t, failFast, func(o *redis.Options) { o.Username, o.Password = "reader", "r-pw" })
	if err := stale.Get(ctx, "app:x").Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("old password after SetUser: %v, want WRONGPASS", err)
	}
	if got, err := s.UserClient(t, "reader").Get(ctx, "app:x").Result(); err != nil || got != "v" {
		t.Errorf("GET with the new password = %q, %v", got, err)
	}

	for _, tc := range []struct { // in order: the server stops, then restarts
		name     string
		f        func(r *recorder)
		wantFail bool
	}{
		{"unknown user", func(r *recorder) { s.UserClient(r, "nobody") }, true},
		{"bad rule", func(r *recorder) { s.SetUser(r, "x", "pw", "+no-such-command") }, true},
		{"default user", func(r *recorder) { s.SetUser(r, "default", "pw", "+@all") }, true},
		{"stopped server", func(r *recorder) { s.Stop(t); s.SetUser(r, "y", "pw", "+get") }, true},
		{"restarted", func(r *recorder) { s.Restart(t); s.SetUser(r, "z", "pw", "+get") }, false},
	} {
		r := &recorder{TB: t}
		tc.f(r)
		if r.failed != tc.wantFail {
			t.Errorf("%s: failed = %v (%q), want %v", tc.name, r.failed, r.msg, tc.wantFail)
		}
	}
}

func TestUsersTLS(t *testing.T) {
	t.Parallel()
	s := Start(t, WithTLS(), WithUser("app", "pw", "~app:*", "+set", "+get"))
	rdb := s.UserClient(t, "app")
	if rdb.Options().TLSConfig == nil {
		t.Fatal("UserClient of a TLS server has no TLS configuration")
	}
	if err := rdb.Set(t.Context(), "app:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET as app over TLS: %v", err)
	}
}

func TestRedactPassword(t *testing.T) {
	err := redactPassword(errors.New("ERR Error in ACL SETUSER modifier '>hunter2x'"), "hunter2x")
	if strings.Contains(err.Error(), "hunter2x") || !strings.Contains(err.Error(), "<password>") {
		t.Errorf("redacted error %q", err)
	}
}
