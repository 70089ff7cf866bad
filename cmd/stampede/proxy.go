package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	stampedeprom "github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/httpcache"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

var proxyCommand = command{
	name: "proxy", args: "",
	summary: "Run a coalescing HTTP cache in front of a service in any language.\n\n" +
		"It serves -upstream through guardhttp. Proxies of one fleet (same -redis and -namespace) share entries: a URL expiring\n" +
		"makes one upstream call for the fleet, and an unsafe request through one drops the URL on\n" +
		"all. -admin serves /metrics, /livez and /readyz. SIGTERM stops it gracefully: the requests\n" +
		"in flight finish, and it exits 0. It writes to Redis (entries, leases, hot keys).",
	example: "stampede proxy -redis localhost:6379 -namespace catalog: -upstream http://127.0.0.1:8081 -listen :8080 -admin :9090",
	setup: func(fs *flag.FlagSet) action {
		var p proxyFlags
		p.register(fs)
		return func(ctx context.Context, out io.Writer, args []string) error {
			if len(args) > 0 {
				return usagef("proxy takes no arguments")
			}
			return proxy(ctx, &p)
		}
	},
}

func proxy(ctx context.Context, p *proxyFlags) error {
	up, err := p.upstreamURL()
	if err != nil {
		return err
	}
	if err := p.check(); err != nil {
		return err
	}
	cfg, err := p.config(up)
	if err != nil {
		return err
	}
	log := newLogger(p.logLevel, p.logFormat)
	redis.SetLogger(redisLog{log})
	rdb, down, redisBack, err := p.proxyClient(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if down != nil {
		log.Warn("stampede proxy: Redis does not answer; serving without it, each proxy on its own, until it does",
			"redis", redact(p.redis), "err", down)
	}
	reg := prometheus.NewRegistry()
	m := stampedeprom.New(stampedeprom.Options{})
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := p.options()
	o.Hooks = guard.MergeHooks(m.GuardHooks(), guard.LogHooks(log))
	g, err := guard.New(rdb, o)
	if err != nil {
		return usagef("%v", err)
	}
	// Checked here, so that a bad setting is an error, not the
	// middleware's panic.
	if _, err := httpcache.New(g, cfg); err != nil {
		_ = g.Close()
		return usagef("%v", err)
	}
	ln, err := net.Listen("tcp", p.listen)
	if err != nil {
		_ = g.Close()
		return err
	}
	srv := &http.Server{Handler: forwardedAsSent(guardhttp.Middleware(g, cfg)(reverseProxy(up, log))),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: p.idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	var adm *http.Server
	if p.admin != "" {
		if adm, err = adminServer(p.admin, p.idleTimeout, g, reg, log); err != nil {
			_ = ln.Close()
			_ = g.Close()
			return err
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("stampede proxy: serving", "listen", ln.Addr().String(), "upstream", up.String(),
		"admin", p.admin, "namespace", p.namespace, "key_host", cfg.KeyHost)
	select {
	case err = <-served:
	case err = <-redisBack:
		log.Error("stampede proxy: " + err.Error())
	case <-ctx.Done():
		err = nil
	}
	return shutdown(p.shutdown, srv, adm, g, log, err)
}

// shutdown stops taking requests, lets those in flight finish (their
// loads fill and release their leases), then closes the Group, which
// waits for its background refreshes.
func shutdown(d time.Duration, srv, adm *http.Server, g *guard.Group, log *slog.Logger, serveErr error) error {
	log.Info("stampede proxy: shutting down", "timeout", d)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := srv.Shutdown(ctx)
	if adm != nil {
		_ = adm.Shutdown(ctx)
	}
	_ = g.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	if err != nil {
		return fmt.Errorf("requests still in flight after %v: %w", d, err)
	}
	log.Info("stampede proxy: stopped")
	return nil
}

// reverseProxy forwards to up: the Host becomes up's, and the client's
// address and scheme go in X-Forwarded-For and X-Forwarded-Proto. Not
// X-Forwarded-Host: it would differ between the proxies of a fleet, and
// a response built from it would be shared with all.
func reverseProxy(up *url.URL, log *slog.Logger) http.Handler {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	return &httputil.ReverseProxy{
		Transport: t,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.SetXForwarded()
			pr.Out.Header.Del("X-Forwarded-Host")
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its URL holds the request's path and query
			}
			if errors.Is(err, context.Canceled) {
				// The flight was given up (every request of it left).
				log.Debug("stampede proxy: upstream call cancelled")
			} else {
				log.Warn("stampede proxy: upstream failed", "err", err)
			}
			w.WriteHeader(upstreamErrorStatus(err))
		},
	}
}

// forwardedAsSent makes the client-address field of each request the one
// reverseProxy sends the upstream (X-Forwarded-For: the client's address),
// and drops the forwarding fields the upstream never sees from a client
// (Forwarded, X-Forwarded-Host, X-Forwarded-Proto: reverseProxy replaces
// or drops them alike for every client). The cache selects a response's
// variant (Vary) and its key by the request's fields: a response that
// varies by X-Forwarded-For (a client's own, as docs/security.md advises)
// was stored under the client's field, absent or spoofed, while the
// upstream had answered for its address, so every client that sent none
// was served the first one's; and a client's X-Forwarded-Host split keys
// the upstream answered alike.
func forwardedAsSent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header
		delete(h, "Forwarded")
		delete(h, "X-Forwarded-Host")
		delete(h, "X-Forwarded-Proto")
		delete(h, "X-Forwarded-For")
		if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			h["X-Forwarded-For"] = []string{ip}
		}
		next.ServeHTTP(w, r)
	})
}

// upstreamErrorStatus is the status of a request whose upstream call
// failed with err: 504 when the upstream did not answer in time (the
// call ran past -load-timeout, RFC 9110 §15.6.5), else 502 (refused,
// reset, a malformed response: §15.6.3).
func upstreamErrorStatus(err error) int {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// adminServer serves /metrics, /livez and /readyz on addr, closing a
// connection idle for idle.
func adminServer(addr string, idle time.Duration, g *guard.Group, reg *prometheus.Registry, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-admin: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// A Redis outage does not fail it: the proxy serves from memory
		// meanwhile. A misconfiguration (an ACL without Lua) does.
		if err := g.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle}
	go func() { _ = srv.Serve(ln) }()
	log.Info("stampede proxy: admin", "listen", ln.Addr().String())
	return srv, nil
}

func newLogger(level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	o := &slog.HandlerOptions{Level: lv}
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, o))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, o))
}

// redisLog hands go-redis's own lines (a pool that cannot dial, during an
// outage) to the proxy's logger: standard error stays one format, JSON
// lines by default.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.LogAttrs(ctx, slog.LevelWarn, "go-redis: "+fmt.Sprintf(format, v...))
}
