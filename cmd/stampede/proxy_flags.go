package main

import (
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/guard"
	guardhttp "github.com/stampede-go/stampede/middleware/nethttp"
)

// proxyFlags are the proxy's settings: where it listens and forwards, the
// guard's Options and every guardhttp.Config setting a flag can carry.
type proxyFlags struct {
	conn
	keyFlags
	upstream, listen, admin string
	shutdown                time.Duration
	idleTimeout             time.Duration // of the clients' connections (http.Server.IdleTimeout)
	logLevel, logFormat     string

	// guard.Options
	freshFor, staleFor, lockTTL, waitTimeout, loadTimeout, localTTL time.Duration
	localEntries, localBytes, maxValueBytes, hotKeys                int

	// guardhttp.Config
	maxBody                                                 int
	statuses                                                list
	honorNoCache, upstreamWindows, requireFreshness, strict bool
	heuristic, storeSetCookie                               bool
	passFor                                                 time.Duration
	targeted                                                string
	skip                                                    list
}

func (p *proxyFlags) register(fs *flag.FlagSet) {
	p.conn.register(fs, 250*time.Millisecond) // the guard's default: it bounds every hit that reads Redis
	p.keyFlags.register(fs, "the Host keyed instead of each request's (Config.KeyHost): by default the -upstream's host,\n"+
		"so that every proxy of the fleet keys a URL alike whatever address or Host it is reached by;\n"+
		"\"-\" keys the Host as sent")
	fs.StringVar(&p.upstream, "upstream", "", "the service proxied, as http://host:port (required)")
	fs.StringVar(&p.listen, "listen", ":8080", "the address the proxy serves on")
	fs.StringVar(&p.admin, "admin", "", "the address of /metrics (Prometheus), /livez and /readyz (none when empty)")
	fs.DurationVar(&p.shutdown, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for the requests in flight")
	fs.DurationVar(&p.idleTimeout, "idle-timeout", 2*time.Minute, "how long a client's keep-alive connection may stay idle before it is closed")
	fs.StringVar(&p.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&p.logFormat, "log-format", "json", "json or text (slog, to standard error)")

	fs.DurationVar(&p.freshFor, "fresh-for", 0, "guard FreshFor: how long a response is served as is (default 1m)")
	fs.Var((*offDuration)(&p.staleFor), "stale-for", "guard StaleFor: how long after that it is served while refreshed (default 5m; off: never)")
	fs.DurationVar(&p.lockTTL, "lock-ttl", 0, "guard LockTTL: the refresh lease (default 10s)")
	fs.DurationVar(&p.waitTimeout, "wait-timeout", 0, "guard WaitTimeout: the longest wait for another proxy's fill, then 503 (default 5s)")
	fs.DurationVar(&p.loadTimeout, "load-timeout", 0, "guard LoadTimeout: the longest upstream call (default 30s)")
	fs.DurationVar(&p.localTTL, "local-ttl", 0, "guard LocalTTL (default 1m)")
	fs.IntVar(&p.localEntries, "local-entries", 0, "guard LocalEntries: responses kept in memory (default 10000; -1: none)")
	fs.IntVar(&p.localBytes, "local-bytes", 0, "guard LocalBytes (default 64 MiB)")
	fs.IntVar(&p.maxValueBytes, "max-value-bytes", 0, "guard MaxValueBytes (default 8 MiB)")
	fs.IntVar(&p.hotKeys, "hot-keys", 0, "guard HotKeys, for stampede top (default 20; -1: off)")

	fs.IntVar(&p.maxBody, "max-body-bytes", 0, "the largest response body stored (Config.MaxBodyBytes; default 1 MiB)")
	fs.Var(&p.statuses, "statuses", "response statuses shared, comma-separated (Config.Statuses; default 200,203,204,300,301,308,404,405,410,414)")
	fs.BoolVar(&p.honorNoCache, "honor-client-no-cache", false, "let a client's no-cache reach the upstream (Config.HonorClientNoCache)")
	fs.BoolVar(&p.upstreamWindows, "upstream-windows", false, "the response's Cache-Control and Expires set its windows (Config.UpstreamWindows)")
	fs.BoolVar(&p.requireFreshness, "require-freshness", false, "store only responses that state their freshness (Config.RequireFreshness)")
	fs.BoolVar(&p.strict, "strict", false, "an RFC 9111 shared cache: -upstream-windows, -require-freshness and -honor-client-no-cache")
	fs.BoolVar(&p.heuristic, "heuristic-freshness", false, "Config.HeuristicFreshness")
	fs.BoolVar(&p.storeSetCookie, "store-set-cookie", false, "share responses with Set-Cookie, the cookie with them (Config.StoreSetCookie)")
	fs.Var((*offDuration)(&p.passFor), "pass-for", "how long a URL whose response could not be shared is passed (Config.PassFor; default 5s; off: never)")
	fs.StringVar(&p.targeted, "targeted-cache-control", "", "targeted Cache-Control fields, comma-separated (Config.TargetedCacheControl; \"none\": none)")
	fs.Var(&p.skip, "skip", "path prefixes passed to the upstream untouched, comma-separated (Config.Skipper)")
}

// options are the guard Options of the flags.
func (p *proxyFlags) options() guard.Options {
	return guard.Options{
		Namespace: p.namespace, RedisTimeout: p.timeout,
		FreshFor: p.freshFor, StaleFor: p.staleFor, LockTTL: p.lockTTL, WaitTimeout: p.waitTimeout,
		LoadTimeout: p.loadTimeout, LocalTTL: p.localTTL, LocalEntries: p.localEntries, LocalBytes: p.localBytes,
		MaxValueBytes: p.maxValueBytes, HotKeys: p.hotKeys,
	}
}

// upstreamURL checks -upstream.
func (p *proxyFlags) upstreamURL() (*url.URL, error) {
	if p.upstream == "" {
		return nil, usagef("-upstream is required")
	}
	if p.shutdown < 0 {
		return nil, usagef("-shutdown-timeout %v: want 0 or more", p.shutdown)
	}
	u, err := url.Parse(p.upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("-upstream %q: want http://host:port or https://host", p.upstream)
	}
	return u, nil
}

// config is the guardhttp Config of the flags, for upstream u.
func (p *proxyFlags) config(u *url.URL) (guardhttp.Config, error) {
	cfg := guardhttp.Config{
		KeyHost: p.keyHost, KeyHeaders: p.keyHeaders, UnkeyedForwarding: p.unkeyedFwd,
		MaxBodyBytes: p.maxBody, HonorClientNoCache: p.honorNoCache || p.strict,
		UpstreamWindows: p.upstreamWindows || p.strict, RequireFreshness: p.requireFreshness || p.strict,
		HeuristicFreshness: p.heuristic, StoreSetCookie: p.storeSetCookie, PassFor: p.passFor,
	}
	switch cfg.KeyHost {
	case "":
		cfg.KeyHost = u.Host
	case "-":
		cfg.KeyHost = ""
	}
	for _, s := range p.statuses {
		n, err := strconv.Atoi(s)
		if err != nil {
			return cfg, usagef("-statuses: %q is not a status", s)
		}
		cfg.Statuses = append(cfg.Statuses, n)
	}
	switch p.targeted {
	case "":
	case "none":
		cfg.TargetedCacheControl = []string{}
	default:
		cfg.TargetedCacheControl = strings.Split(p.targeted, ",")
	}
	if len(p.skip) > 0 {
		prefixes := []string(p.skip)
		cfg.Skipper = func(r *http.Request) bool {
			for _, s := range prefixes {
				if strings.HasPrefix(r.URL.Path, s) {
					return true
				}
			}
			return false
		}
	}
	return cfg, nil
}

// check reports the flags that cannot work.
func (p *proxyFlags) check() error {
	if p.listen == "" {
		return usagef("-listen is required")
	}
	if p.idleTimeout <= 0 {
		// 0 would keep an idle connection for ever: any client could
		// hold the proxy's file descriptors.
		return usagef("-idle-timeout %v: want a positive duration", p.idleTimeout)
	}
	switch p.logFormat {
	case "json", "text":
	default:
		return usagef("-log-format %q: want json or text", p.logFormat)
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(p.logLevel)); err != nil {
		return usagef("-log-level %q: want debug, info, warn or error", p.logLevel)
	}
	return nil
}

// offDuration is a duration flag that also takes "off": guard.Disabled.
type offDuration time.Duration

func (d *offDuration) String() string {
	if *d == offDuration(guard.Disabled) {
		return "off"
	}
	return time.Duration(*d).String()
}

func (d *offDuration) Set(s string) error {
	if s == "off" {
		*d = offDuration(guard.Disabled)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return errors.New("want a duration, or off")
	}
	*d = offDuration(v)
	return nil
}
