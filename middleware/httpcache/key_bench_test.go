package httpcache

import (
	"net/http"
	"testing"
)

// BenchmarkDeriveKey: the key of a request without forwarding headers,
// and of one through a proxy that sets four of them.
func BenchmarkDeriveKey(b *testing.B) {
	plain := request("shop.example", "/products/42?sort=price&page=2", false, "fr")
	proxied := request("shop.example", "/products/42?sort=price&page=2", false, "fr")
	proxied.Header = http.Header{
		"Accept-Language":   {"fr"},
		"X-Forwarded-For":   {"192.0.2.1"},
		"X-Forwarded-Proto": {"https"},
		"X-Forwarded-Host":  {"shop.example"},
		"X-Forwarded-Port":  {"443"},
		"Forwarded":         {"for=192.0.2.1;proto=https;host=shop.example"},
	}
	headers := []string{"Accept-Language"}
	for _, bc := range []struct {
		name string
		r    *http.Request
	}{{"plain", plain}, {"proxied", proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = defaultKey(bc.r, headers)
			}
		})
	}
}

// BenchmarkEngineKey: the key a request pays for in Serve (engine.derived),
// for a URL asked before: the same requests as BenchmarkDeriveKey.
func BenchmarkEngineKey(b *testing.B) {
	plain := request("shop.example", "/products/42?sort=price&page=2", false, "fr")
	proxied := request("shop.example", "/products/42?sort=price&page=2", false, "fr")
	proxied.Header = http.Header{
		"Accept-Language":   {"fr"},
		"X-Forwarded-For":   {"192.0.2.1"},
		"X-Forwarded-Proto": {"https"},
		"X-Forwarded-Host":  {"shop.example"},
		"X-Forwarded-Port":  {"443"},
		"Forwarded":         {"for=192.0.2.1;proto=https;host=shop.example"},
	}
	e := newEngine(nil, &Config[*http.Request]{KeyHeaders: []string{"Accept-Language"}})
	for _, bc := range []struct {
		name string
		r    *http.Request
	}{{"plain", plain}, {"proxied", proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = e.derived(bc.r)
			}
		})
	}
}
