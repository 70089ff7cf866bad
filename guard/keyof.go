package guard

import (
	"strconv"
	"strings"

	"github.com/stampede-go/stampede/internal/hashtag"
)

// The roles of the Redis names a Group keeps, as KeyOf names them.
const (
	roleEntry   = "entry"
	roleLease   = "lease"
	roleBackup  = "backup"
	roleFence   = "fence"
	roleWaiters = "waiters"
	roleInv     = "inv"
	roleTag     = "tag"
	roleTagInv  = "taginv"
	roleDrain   = "tagdrain"
	roleHotKeys = "hotkeys"
)

// KeyOf returns the key a Redis name of the Namespace belongs to and its
// role ("entry", "lease", "backup", "fence", "waiters", "inv", "tag",
// "taginv", "tagdrain", "hotkeys"); ok is false for a name the Group does
// not make.
func (g *Group) KeyOf(name string) (key, role string, ok bool) {
	rest, ok := strings.CutPrefix(name, g.opts.Namespace+"{")
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return "", "", false
	}
	tag, ok := unescape(rest[:i])
	if !ok {
		return "", "", false
	}
	after := rest[i+1:]
	if own, ok := strings.CutPrefix(after, "/"); ok {
		// A key with a hash tag of its own: "/" len ":" key, then a suffix.
		n, k, ok := strings.Cut(own, ":")
		l, err := strconv.Atoi(n)
		if !ok || err != nil || l < 0 || l > len(k) || n != strconv.Itoa(l) {
			return "", "", false
		}
		if t, has := hashtag.Tag(k[:l]); !has || t != tag {
			return "", "", false
		}
		if role, ok := keyRole(k[l:]); ok {
			return k[:l], role, true
		}
		return "", "", false
	}
	switch {
	case after == ":tkeys":
		return tag, roleTag, true
	case after == ":tinv":
		return tag, roleTagInv, true
	case strings.HasPrefix(after, ":tdrain:") && len(after) > len(":tdrain:"):
		return tag, roleDrain, true
	case tag == hotTag && (after == ":nodes" || strings.HasPrefix(after, ":node:")):
		return "", roleHotKeys, true
	}
	if _, has := hashtag.Tag(tag); has {
		return "", "", false // such a key's names take the "/" form
	}
	if role, ok := keyRole(after); ok {
		return tag, role, true
	}
	return "", "", false
}

// keyRole is the role of the suffix of one of a key's names.
func keyRole(suffix string) (string, bool) {
	switch suffix {
	case "":
		return roleEntry, true
	case ":lease":
		return roleLease, true
	case ":fence":
		return roleFence, true
	case ":w":
		return roleWaiters, true
	case ":inv":
		return roleInv, true
	case ":backup":
		return roleBackup, true
	}
	return "", false
}

// unescape inverts hashtag.Escape; ok is false for a string it does not
// make.
func unescape(s string) (string, bool) {
	if s == "%00" {
		return "", true
	}
	if !strings.Contains(s, "%") {
		return s, s != ""
	}
	out := strings.NewReplacer("%25", "%", "%7D", "}").Replace(s)
	return out, hashtag.Escape(out) == s
}
