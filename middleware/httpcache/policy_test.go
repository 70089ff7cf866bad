package httpcache

import (
	"testing"
)

// TestMethodOverrideBypasses: a GET asking to be another method is not
// shared.
func TestMethodOverrideBypasses(t *testing.T) {
	e := &engine{}
	for _, name := range methodOverrideHeaders {
		r := request("a.example", "/p", false, "")
		r.Header.Set(name, "DELETE")
		if got := e.bypass(r); got != "method override" {
			t.Errorf("%s: bypass %q", name, got)
		}
	}
}
