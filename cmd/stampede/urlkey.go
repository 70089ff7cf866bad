package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/middleware/httpcache"
)

// keyFlags are the guardhttp settings that decide an HTTP key, as the
// middleware (or the proxy) of the fleet has them.
type keyFlags struct {
	keyHost    string
	keyHeaders list
	unkeyedFwd bool
}

func (k *keyFlags) register(fs *flag.FlagSet, keyHostHelp string) {
	fs.StringVar(&k.keyHost, "key-host", "", keyHostHelp)
	fs.Var(&k.keyHeaders, "key-headers", "request headers whose values are keyed, comma-separated (Config.KeyHeaders)")
	fs.BoolVar(&k.unkeyedFwd, "unkeyed-forwarding", false, "leave the forwarding headers out of the key (Config.UnkeyedForwarding)")
}

func (k *keyFlags) config() httpcache.Config[*http.Request] {
	return httpcache.Config[*http.Request]{KeyHost: k.keyHost, KeyHeaders: k.keyHeaders, UnkeyedForwarding: k.unkeyedFwd}
}

// urlFlags name one URL, as a request the middleware would key.
type urlFlags struct {
	keyFlags
	url     string
	headers multi
}

func (u *urlFlags) register(fs *flag.FlagSet) {
	u.keyFlags.register(fs, "the Host keyed instead of the URL's (Config.KeyHost; stampede proxy keys its -upstream's host)")
	fs.StringVar(&u.url, "url", "", "a URL, as 'GET https://host/path?q=1' (GET by default): its HTTP entries")
	fs.Var(&u.headers, "header", "a request header of the -url request, 'Name: value' (repeat it for more)")
}

// key returns the guard key of u's request, derived by the HTTP engine
// of g, and the hash tag every key of its URL holds.
func (u *urlFlags) key(g *guard.Group) (key, tag string, err error) {
	r, err := u.request()
	if err != nil {
		return "", "", usagef("-url %q: %v", u.url, err)
	}
	eng, err := httpcache.New(g, u.config())
	if err != nil {
		return "", "", usagef("%v", err)
	}
	key = eng.Key(r)
	if key == "" {
		return "", "", usagef("-url %q: such a request is never shared (credentials, a method override...)", u.url)
	}
	tag, _, _ = strings.Cut(key[1:], "}") // "{tag}..."
	return key, tag, nil
}

// check reports a -url that names no request the middleware would key.
func (u *urlFlags) check() error {
	if u.url == "" {
		return nil
	}
	if _, err := u.request(); err != nil {
		return usagef("-url %q: %v", u.url, err)
	}
	return nil
}

// request builds u's request as a server reads it off the wire.
func (u *urlFlags) request() (*http.Request, error) {
	method, raw, ok := strings.Cut(strings.TrimSpace(u.url), " ")
	if !ok {
		method, raw = http.MethodGet, method
	}
	raw = strings.TrimSpace(raw)
	if method != http.MethodGet && method != http.MethodHead {
		return nil, fmt.Errorf("method %s: only GET and HEAD responses are stored", method)
	}
	p, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
		return nil, fmt.Errorf("want an absolute http or https URL")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", p.RequestURI(), p.Host)
	for _, h := range u.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("-header %q: want 'Name: value'", h)
		}
		fmt.Fprintf(&b, "%s: %s\r\n", strings.TrimSpace(name), strings.TrimSpace(value))
	}
	b.WriteString("\r\n")
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
	if err != nil {
		return nil, err
	}
	if p.Scheme == "https" {
		r.TLS = &tls.ConnectionState{}
	}
	return r, nil
}

// list is a flag of comma-separated values, which may be repeated.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// multi is a flag that may be repeated, each value whole.
type multi []string

func (m *multi) String() string { return strings.Join(*m, "; ") }

func (m *multi) Set(s string) error {
	*m = append(*m, s)
	return nil
}
