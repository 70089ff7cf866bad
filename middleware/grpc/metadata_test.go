package guardgrpc

import (
	"strings"
	"testing"
)

// TestDefaultMetadataLists: every default entry is a valid metadata key,
// named once, and no default prefix swallows an entry keyed by default.
func TestDefaultMetadataLists(t *testing.T) {
	seen := map[string]string{}
	for list, names := range map[string][]string{"ignored": ignoredNames, "forwarding": forwardingMetadata, "identity": identityMetadata} {
		for _, k := range names {
			if metadataKey("test", k) != k {
				t.Errorf("%s: %q is not lower-case", list, k)
			}
			if prev, ok := seen[k]; ok {
				t.Errorf("%q in %s and %s", k, prev, list)
			}
			seen[k] = list
			for _, p := range ignoredPrefixes {
				if strings.HasPrefix(k, p) {
					t.Errorf("%s: %q also covered by the ignored prefix %q", list, k, p)
				}
			}
		}
	}
	o := evaluateOptions(nil)
	for k, list := range seen {
		want := map[string]mdRule{"ignored": mdIgnore, "forwarding": mdDefault, "identity": mdDefault}[list]
		if got := o.rule(k); got != want {
			t.Errorf("%s %q: got rule %d, want %d", list, k, got, want)
		}
	}
	if got := o.rule("x-locale"); got != mdBypass {
		t.Errorf("x-locale: got rule %d, want bypass", got)
	}
}

// TestMetadataRulePrecedence: options are more specific than defaults.
func TestMetadataRulePrecedence(t *testing.T) {
	o := evaluateOptions([]Option{
		WithMetadata("baggage", "x-tenant"),
		WithIgnoredMetadata("x-forwarded-client-cert", "x-forwarded-host", "x-*", "*"),
		WithUnkeyedForwarding(),
	})
	for k, want := range map[string]mdRule{
		"baggage":                  mdKeyed,  // keyed beats ignored by default
		"x-tenant":                 mdKeyed,  // keyed beats an ignored prefix
		"x-forwarded-client-cert":  mdIgnore, // ignored by name beats keyed by default
		"x-envoy-internal":         mdIgnore, // an ignored prefix beats keyed by default
		"x-forwarded-for":          mdIgnore, // WithUnkeyedForwarding
		"forwarded":                mdIgnore, // WithUnkeyedForwarding
		"x-envoy-peer-metadata-id": mdIgnore, // "x-*"
		"locale":                   mdIgnore, // "*"
	} {
		if got := o.rule(k); got != want {
			t.Errorf("%q: got rule %d, want %d", k, got, want)
		}
	}
	o = evaluateOptions([]Option{WithUnkeyedForwarding(), WithIgnoredMetadata("*")})
	for k, want := range map[string]mdRule{
		"x-forwarded-client-cert": mdDefault, // identity: neither option unkeys it
		"x-forwarded-for":         mdIgnore,
		"locale":                  mdIgnore,
	} {
		if got := o.rule(k); got != want {
			t.Errorf("%q: got rule %d, want %d", k, got, want)
		}
	}
}
