package conformance

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/guard"
)

// Misuse holds a to the adapters' one rule for programmer errors: building
// the middleware with a nil Group or a Config out of range panics at once,
// with a message that names the adapter's package (prefix) and the
// setting, never an internal package; a valid Config never panics.
func Misuse(t *testing.T, a Adapter, prefix string) {
	g := MiniGroup(t, guard.Options{MaxValueBytes: 1 << 20})
	origin := http.NotFoundHandler()
	rows := []struct {
		name string
		g    *guard.Group
		cfg  Config
		want string // in the message
	}{
		{"nil Group", nil, Config{}, "nil *guard.Group"},
		{"negative MaxBodyBytes", g, Config{MaxBodyBytes: -5}, "MaxBodyBytes"},
		{"MaxBodyBytes above MaxValueBytes", g, Config{MaxBodyBytes: 2 << 20}, "MaxValueBytes"},
		{"a 5xx in Statuses", g, Config{Statuses: []int{200, 500}}, "500"},
		{"206 in Statuses", g, Config{Statuses: []int{206}}, "206"},
		{"304 in Statuses", g, Config{Statuses: []int{304}}, "304"},
		{"1xx in Statuses", g, Config{Statuses: []int{103}}, "103"},
		{"a KeyHeaders name that is no field name", g, Config{KeyHeaders: []string{"Bad Name"}}, "KeyHeaders"},
		{"a targeted field that is no field name", g, Config{TargetedCacheControl: []string{"a:b"}}, "TargetedCacheControl"},
		{"a KeyHost with a space", g, Config{KeyHost: "a b"}, "KeyHost"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			msg := func() (msg string) {
				defer func() {
					if p := recover(); p != nil {
						msg = fmt.Sprint(p)
					}
				}()
				a.New(row.g, row.cfg, origin)
				return ""
			}()
			switch {
			case msg == "":
				t.Fatalf("no panic")
			case !strings.HasPrefix(msg, prefix+": ") || !strings.Contains(msg, row.want) || strings.Contains(msg, "httpcache"):
				t.Errorf("panic %q: want %q first, naming %q, no internal package", msg, prefix+": ", row.want)
			}
		})
	}
	t.Run("valid settings", func(t *testing.T) {
		a.New(g, Config{MaxBodyBytes: 1 << 20, Statuses: []int{200, 404}, KeyHeaders: []string{"Accept-Language"},
			TargetedCacheControl: []string{}, KeyHost: "shop.example", PassFor: -1}, origin)
	})
}

// keyHost: with Config.KeyHost, requests for the URL under any Host share
// one entry (a load balancer that rewrites Host to each backend's
// address); without it, each Host is its own key.
func keyHost(t *testing.T, a Adapter, top topology) {
	noLeaks(t)
	var calls int
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++; fmt.Fprint(w, "x") })
	for _, c := range []struct {
		cfg   Config
		calls int
	}{{Config{}, 2}, {Config{KeyHost: "shop.example"}, 1}} {
		calls = 0
		g := NewGroup(t, top.client(t), guard.Options{})
		h := a.New(g, c.cfg, origin)
		for _, host := range []string{"10.0.0.1:8080", "10.0.0.2:8080"} {
			r := get("/page")
			r.Host = host
			serve(h, r)
		}
		if calls != c.calls {
			t.Errorf("KeyHost %q: %d handler calls for two backends' Hosts, want %d", c.cfg.KeyHost, calls, c.calls)
		}
	}
}
