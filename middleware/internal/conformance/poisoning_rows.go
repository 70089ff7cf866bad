package conformance

import (
	"slices"
	"strings"
)

// The twelve forwarding and override headers, and those echo's
// Context.Scheme and common proxies add; the origin reads them all, as
// applications and their frameworks do. Independent of the engine's list,
// so a header dropped there fails here.
var appForwarding = []string{
	"X-Forwarded-Host", "X-Forwarded-Scheme", "X-Forwarded-Proto", "X-Forwarded-Port",
	"X-Forwarded-Prefix", "X-Forwarded-Server", "Forwarded", "X-Host", "X-Original-Host",
	"X-Original-URL", "X-Rewrite-URL", "X-HTTP-Host-Override",
	"X-Forwarded-Protocol", "X-Forwarded-Ssl", "X-Url-Scheme", "X-Scheme",
	"X-Forwarded-Uri", "X-Original-Uri", "Front-End-Https",
}

var appMethodOverride = []string{"X-HTTP-Method-Override", "X-Method-Override", "X-HTTP-Method"}

// req builds a raw GET request: the request line (method and target),
// then header lines; "Host: good.example" unless a Host line is given, and
// "Connection: close".
func req(line string, headers ...string) string {
	var b strings.Builder
	b.WriteString(line + " HTTP/1.1\r\n")
	if !slices.ContainsFunc(headers, func(h string) bool { return strings.HasPrefix(strings.ToLower(h), "host:") }) {
		b.WriteString("Host: good.example\r\n")
	}
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.String()
}

// page is the victim's usual request.
var page = req("GET /page")

// poisoningRows is the suite, topic by topic, in the order the rows run.
func poisoningRows() []poisonRow {
	return slices.Concat(forwardingRows(), proxyRows(), requestRows(), urlRows(), deceptionRows(), varyPoisonRows())
}

// forwardingRows: forwarding headers the origin reads, one by one and in the
// ways proxies write them.
func forwardingRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	for _, h := range appForwarding {
		add(poisonRow{name: "forwarding/" + h, attacker: req("GET /page", h+": evil.example"), victim: page})
		// Another field to Go, the same to a CGI-style application.
		if underscored := strings.ReplaceAll(h, "-", "_"); underscored != h {
			add(poisonRow{name: "forwarding/" + underscored, attacker: req("GET /page", underscored+": evil.example"), victim: page})
		}
		add(poisonRow{name: "forwarding/" + h + " differs from the proxy's",
			attacker: req("GET /page", h+": evil.example"), victim: req("GET /page", h+": good.example")})
	}
	add(poisonRow{name: "forwarding/Forwarded host", attacker: req("GET /page", "Forwarded: for=192.0.2.1;host=evil.example"), victim: req("GET /page", "Forwarded: for=192.0.2.1;host=good.example")})
	add(poisonRow{name: "forwarding/Forwarded host smuggled in a quoted for",
		attacker: req("GET /page", `Forwarded: for="192.0.2.1;host=evil.example"`), victim: req("GET /page", "Forwarded: for=192.0.2.1")})
	add(poisonRow{name: "forwarding/Forwarded second element",
		attacker: req("GET /page", "Forwarded: for=192.0.2.1, host=evil.example"), victim: req("GET /page", "Forwarded: for=192.0.2.1")})
	add(poisonRow{name: "forwarding/X-Forwarded-Host appended by a proxy",
		attacker: req("GET /page", "X-Forwarded-Host: evil.example, good.example"), victim: req("GET /page", "X-Forwarded-Host: good.example")})
	add(poisonRow{name: "forwarding/header line twice",
		attacker: req("GET /page", "X-Forwarded-Host: good.example", "X-Forwarded-Host: evil.example"), victim: req("GET /page", "X-Forwarded-Host: good.example")})
	return rows
}

// proxyRows: the same forwarding values from a proxy, and the opt-out.
func proxyRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	// Behind a proxy that sets them alike for everyone, the forwarding
	// headers cost no hit: the client's own address is not keyed.
	proxied := func(client string) string {
		return req("GET /page", "X-Forwarded-Proto: https", "X-Forwarded-Host: good.example", "X-Forwarded-Port: 443",
			"X-Forwarded-For: "+client, "X-Real-Ip: "+client, "Forwarded: for="+client+";proto=https;host=good.example")
	}
	add(poisonRow{name: "proxy/same forwarding values, other client: hit", attacker: proxied("192.0.2.1"), victim: proxied("198.51.100.7"), want: shared})
	add(poisonRow{name: "proxy/quoted IPv6 client: hit", attacker: proxied(`"[2001:db8::1]:4711"`), victim: proxied("198.51.100.7"), want: shared})
	add(poisonRow{name: "proxy/response varying on the client address",
		origin:   reflector{reads: "X-Forwarded-For", vary: true},
		attacker: req("GET /page", "X-Forwarded-For: evil"), victim: req("GET /page", "X-Forwarded-For: 198.51.100.7")})

	// Opting out: an application that validates the headers itself.
	add(poisonRow{name: "opt-out/unkeyed forwarding shares when the origin ignores them",
		cfg: Config{UnkeyedForwarding: true}, origin: reflector{ignoreForwarding: true},
		attacker: req("GET /page", "X-Forwarded-Host: evil.example"), victim: page, want: shared})
	add(poisonRow{name: "opt-out/Vary on an unkeyed forwarding header is not stored",
		cfg: Config{UnkeyedForwarding: true}, origin: reflector{ignoreForwarding: true, reads: "X-Forwarded-Host", vary: true},
		attacker: req("GET /page", "X-Forwarded-Host: evil.example"), victim: page})
	return rows
}

// requestRows: method overrides, bodies on a GET, the Host field and
// absolute-form targets.
func requestRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	for _, h := range appMethodOverride {
		add(poisonRow{name: "method override/" + h, attacker: req("GET /page", h+": DELETE"), victim: page})
	}
	add(poisonRow{name: "method override/_method query", attacker: req("GET /page?_method=DELETE"), victim: page})

	add(poisonRow{name: "body/GET with Content-Length", attacker: req("GET /page", "Content-Length: 5") + "evil!", victim: page})
	add(poisonRow{name: "body/GET chunked", attacker: req("GET /page", "Transfer-Encoding: chunked") + "5\r\nevil!\r\n0\r\n\r\n", victim: page})

	add(poisonRow{name: "host/duplicate Host", attacker: req("GET /page", "Host: good.example", "Host: evil.example"), victim: page})
	add(poisonRow{name: "host/case", attacker: req("GET /page", "Host: GOOD.example"), victim: page})
	add(poisonRow{name: "host/explicit port", attacker: req("GET /page", "Host: good.example:80"), victim: page})
	add(poisonRow{name: "host/trailing dot", attacker: req("GET /page", "Host: good.example."), victim: page})
	add(poisonRow{name: "absolute-form/other host", attacker: req("GET http://evil.example/page"), victim: page})
	add(poisonRow{name: "absolute-form/same host", attacker: req("GET http://good.example/page"), victim: page})
	add(poisonRow{name: "absolute-form/odd scheme", attacker: req("GET evil://good.example/page"), victim: page})
	add(poisonRow{name: "absolute-form/userinfo", attacker: req("GET http://evil@good.example/page"), victim: page})
	return rows
}

// urlRows: spellings of the query and the path.
func urlRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	add(poisonRow{name: "query/semicolon separator", attacker: req("GET /page?q=1;x=evil"), victim: req("GET /page?q=1%3Bx=evil")})
	add(poisonRow{name: "query/escaped semicolon", attacker: req("GET /page?q=1%3Bx=evil"), victim: req("GET /page?q=1;x=evil")})
	add(poisonRow{name: "query/trailing semicolon", attacker: req("GET /page?q=1;"), victim: req("GET /page?q=1")})
	add(poisonRow{name: "query/repeated parameter order", attacker: req("GET /page?q=evil&q=good"), victim: req("GET /page?q=good&q=evil")})
	add(poisonRow{name: "query/repeated parameter added", attacker: req("GET /page?q=good&q=evil"), victim: req("GET /page?q=good")})
	add(poisonRow{name: "query/invalid escape", attacker: req("GET /page?q=%zz"), victim: req("GET /page?q=%25zz")})
	add(poisonRow{name: "query/escaped name", attacker: req("GET /page?%71=evil"), victim: req("GET /page?p=evil")})
	add(poisonRow{name: "query/plus and %20 parse alike: hit", attacker: req("GET /page?q=a+b"), victim: req("GET /page?q=a%20b"), want: shared})
	add(poisonRow{name: "query/escaped name parses alike: hit", attacker: req("GET /page?%71=1"), victim: req("GET /page?q=1"), want: shared})
	add(poisonRow{name: "query/order of distinct names: hit", attacker: req("GET /page?a=1&b=2"), victim: req("GET /page?b=2&a=1"), want: shared})

	for _, p := range []string{"/a//b", "/a/./b", "/a/../a/b", "/a%2fb", "/a%2Fb", "/A/b", "/a/b/", "/a;x=1/b", "/a/%62", "/a/b%00"} {
		add(poisonRow{name: "path/" + p, attacker: req("GET " + p), victim: req("GET /a/b")})
	}
	add(poisonRow{name: "path/unescaped brace and its escape", attacker: req("GET /a{b"), victim: req("GET /a%7Bb")})
	add(poisonRow{name: "path/escape case", attacker: req("GET /a%2fb"), victim: req("GET /a%2Fb")})
	return rows
}

// deceptionRows: cache deception.
func deceptionRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	// Cache deception: a private page on a path that looks static. Even
	// when the application forgets to say private (or says public), the
	// credentials keep it out of the cache.
	static := reflector{headers: []string{"Content-Type", "text/css", "Cache-Control", "public, max-age=3600"}}
	for _, p := range []string{"/account/settings/x.css", "/account/settings;x.css", "/account/settings%2fx.css", "/account/settings/..%2fx.js"} {
		add(poisonRow{name: "deception/cookie " + p, origin: static, attacker: req("GET "+p, "Cookie: session=victim"), victim: req("GET " + p)})
	}
	add(poisonRow{name: "deception/authorization", origin: static, attacker: req("GET /account/settings/x.css", "Authorization: Bearer victim"), victim: req("GET /account/settings/x.css")})
	add(poisonRow{name: "deception/empty cookie", origin: static, attacker: req("GET /account/settings/x.css", "Cookie: "), victim: req("GET /account/settings/x.css")})
	return rows
}

// varyPoisonRows: a header the response varies on, or the key holds.
func varyPoisonRows() []poisonRow {
	var rows []poisonRow
	add := func(r poisonRow) { rows = append(rows, r) }

	add(poisonRow{name: "vary/header the response varies on", origin: reflector{reads: "Accept-Language", vary: true},
		attacker: req("GET /page", "Accept-Language: evil"), victim: req("GET /page", "Accept-Language: en")})
	add(poisonRow{name: "vary/KeyHeaders", cfg: Config{KeyHeaders: []string{"Accept-Language"}}, origin: reflector{reads: "Accept-Language"},
		attacker: req("GET /page", "Accept-Language: evil"), victim: req("GET /page", "Accept-Language: en")})
	return rows
}
