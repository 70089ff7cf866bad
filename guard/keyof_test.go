package guard

import (
	"testing"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// keyOfRoles are the roles of names(key).keys, in order.
var keyOfRoles = []string{roleEntry, roleLease, roleFence, roleWaiters, roleInv, roleTag, roleTagInv}

// TestKeyOf: every name a key's names holds maps back to the key (or its
// tag) and its role; names the Group does not make do not.
func TestKeyOf(t *testing.T) {
	g := newGroup(t, redistest.Shared(t).Client(t), Options{Namespace: "ko:"})
	for _, key := range []string{"user:42", "a}b", "%7D", "100%", "{t}x", "x{t}y", "{}", "{", "}{a}", "a{b%}c}d", "\x00\n"} {
		nm := g.names(key)
		for i, name := range nm.keys {
			want := key
			if i >= 5 {
				want, _ = hashtag.Tag(key)
			}
			got, role, ok := g.KeyOf(name)
			if !ok || got != want || role != keyOfRoles[i] {
				t.Errorf("KeyOf(%q) = %q, %q, %v; want %q, %q", name, got, role, ok, want, keyOfRoles[i])
			}
		}
	}
	for _, key := range []string{"user:42", "{t}x"} {
		nm := g.names(key)
		if got, role, ok := g.KeyOf(nm.backupLease()); !ok || got != key || role != roleBackup {
			t.Errorf("KeyOf(%q) = %q, %q, %v; want %q, backup", nm.backupLease(), got, role, ok, key)
		}
	}
	if got, role, ok := g.KeyOf("ko:{t}:tdrain:x1"); !ok || got != "t" || role != roleDrain {
		t.Errorf("KeyOf of a drained set = %q, %q, %v; want t, tagdrain", got, role, ok)
	}
	index, prefix := hotNames("ko:")
	for _, name := range []string{index, prefix + "host/1/ab"} {
		if _, role, ok := g.KeyOf(name); !ok || role != roleHotKeys {
			t.Errorf("KeyOf(%q) = %q, %v; want hotkeys", name, role, ok)
		}
	}
	for _, name := range []string{
		"other:{k}", "ko:k", "ko:{k", "ko:{k}:other", "ko:{%zz}", "ko:{}", "ko:{t}/2:{t}", "ko:{t}/03:{t}x",
		"ko:{t}/4:{u}x", "ko:{{t}x}", "ko:{k}/1:k:lease", "ko:{%7D}/3:x}y", "ko:{t}:tdrain:",
	} {
		if key, role, ok := g.KeyOf(name); ok {
			t.Errorf("KeyOf(%q) = %q, %q; want not a name of the Group", name, key, role)
		}
	}
}

// FuzzKeyOf: for any key, each of its names maps back to it.
func FuzzKeyOf(f *testing.F) {
	g := &Group{opts: Options{Namespace: "fz:"}}
	for _, k := range []string{"k", "{t}k", "%", "}", "{a}{b}", "a{}b{c}"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if key == "" {
			return
		}
		for i, name := range g.names(key).keys {
			want := key
			if i >= 5 {
				want, _ = hashtag.Tag(key)
			}
			if got, role, ok := g.KeyOf(name); !ok || got != want || role != keyOfRoles[i] {
				t.Fatalf("KeyOf(%q) = %q, %q, %v; want %q, %q", name, got, role, ok, want, keyOfRoles[i])
			}
		}
	})
}
