package httpcache

import (
	"net/http"
	"testing"
	"time"
)

func TestUpstreamWindowsParse(t *testing.T) {
	const s = time.Second
	rows := []struct {
		cc, age string
		want    windows
		ok      bool
	}{
		{cc: "", ok: false},
		{cc: "public", ok: false},
		{cc: "max-age=10", want: windows{fresh: 10 * s, freshSet: true}, ok: true},
		{cc: "max-age=10, s-maxage=20", want: windows{fresh: 20 * s, freshSet: true}, ok: true},
		{cc: "S-MaxAge=5, max-age=20", want: windows{fresh: 5 * s, freshSet: true}, ok: true},
		{cc: "max-age=60", age: "55", want: windows{fresh: 5 * s, freshSet: true}, ok: true},
		{cc: "max-age=60", age: "90", want: windows{fresh: 0, freshSet: true}, ok: true},
		{cc: "max-age=10, stale-while-revalidate=30", want: windows{fresh: 10 * s, stale: 30 * s, freshSet: true}, ok: true},
		{cc: "max-age=10, stale-if-error=40", want: windows{fresh: 10 * s, stale: 40 * s, freshSet: true}, ok: true},
		{cc: "max-age=10, stale-while-revalidate=30, stale-if-error=20", want: windows{fresh: 10 * s, stale: 30 * s, freshSet: true}, ok: true},
		{cc: "stale-while-revalidate=30", want: windows{stale: 30 * s}, ok: true},
		{cc: `max-age="7"`, want: windows{fresh: 7 * s, freshSet: true}, ok: true},
		{cc: "max-age=soon", want: windows{fresh: 0, freshSet: true}, ok: true},
		{cc: "max-age=5, max-age=50", want: windows{fresh: 5 * s, freshSet: true}, ok: true},
	}
	for _, row := range rows {
		h := http.Header{}
		if row.cc != "" {
			h.Set("Cache-Control", row.cc)
		}
		if row.age != "" {
			h.Set("Age", row.age)
		}
		got, ok := upstreamWindows(h)
		if ok != row.ok || (ok && got != row.want) {
			t.Errorf("%q (Age %q): got %+v, %v; want %+v, %v", row.cc, row.age, got, ok, row.want, row.ok)
		}
	}
}

// TestMethodOverrideBypasses: a GET asking to be another method is not
// shared.
func TestMethodOverrideBypasses(t *testing.T) {
	e := &Engine{}
	for _, name := range methodOverrideHeaders {
		r := request("a.example", "/p", false, "")
		r.Header.Set(name, "DELETE")
		if got := e.bypass(r); got != "method override" {
			t.Errorf("%s: bypass %q", name, got)
		}
	}
}
