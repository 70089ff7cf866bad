package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/stampede-go/stampede/guard"
)

var inspectCommand = command{
	name: "inspect", args: "KEY... | -url 'GET URL'",
	summary: "Print what Redis holds for keys, or for a URL's HTTP entries.\n\n" +
		"Per key: the entry's state on the Redis clock (fresh, stale, negative, error, revalidate,\n" +
		"oversize, pass, failing, expired, invalidated, corrupt, missing), its fresh and stale windows\n" +
		"left, age, size, the refresh lease and its fence, the fence counter, the waiters, and a tagged\n" +
		"key's tag keys. -url derives a URL's key as the HTTP middleware does, and lists its variants.\n" +
		"It only reads; it exits 1 when a key is missing.",
	example: "stampede inspect -redis localhost:6379 -namespace catalog: user:42 user:43",
	setup: func(fs *flag.FlagSet) action {
		var t target
		t.register(fs)
		asJSON := fs.Bool("json", false, "print JSON, a list of objects, one per key (durations in milliseconds)")
		return func(ctx context.Context, out io.Writer, args []string) error {
			return inspect(ctx, out, &t, *asJSON, args)
		}
	},
}

func inspect(ctx context.Context, out io.Writer, t *target, asJSON bool, keys []string) error {
	if err := t.one("name a key, or -url", "name keys or -url, not both", len(keys)); err != nil {
		return err
	}
	if err := checkKeys(keys); err != nil {
		return err
	}
	r, stop, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer stop()
	var infos []guard.KeyInfo
	if t.u.url != "" {
		infos, err = inspectURL(ctx, r.g, r.key)
	} else {
		infos, err = inspectKeys(ctx, r.g, keys)
	}
	if err != nil {
		return err
	}
	if asJSON {
		err = writeJSON(out, infos)
	} else {
		err = writeInfos(out, infos, t.u.url != "")
	}
	if err != nil {
		return err
	}
	var missing []string
	for _, ki := range infos[:max(len(keys), 1)] {
		if ki.State == "missing" {
			missing = append(missing, strconv.Quote(ki.Key))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

func inspectKeys(ctx context.Context, g *guard.Group, keys []string) ([]guard.KeyInfo, error) {
	infos := make([]guard.KeyInfo, 0, len(keys))
	for _, k := range keys {
		ki, err := g.Inspect(ctx, k)
		if err != nil {
			return nil, err
		}
		infos = append(infos, ki)
	}
	return infos, nil
}

// inspectURL inspects the URL's key, then each other key of its URL's
// tag: its variants (by KeyHeaders, forwarding headers, Vary) and its
// other spellings. A member of the tag's key set that is no key the guard
// takes (written by someone else) is shown as corrupt, not inspected.
func inspectURL(ctx context.Context, g *guard.Group, key string) ([]guard.KeyInfo, error) {
	ki, err := g.Inspect(ctx, key)
	if err != nil {
		return nil, err
	}
	infos := []guard.KeyInfo{ki}
	for _, k := range ki.TagKeys {
		if k == key {
			continue
		}
		if k == "" || len(k) > guard.MaxKeyBytes {
			infos = append(infos, guard.KeyInfo{Key: k, State: "corrupt"})
			continue
		}
		v, err := g.Inspect(ctx, k)
		if err != nil {
			return nil, err
		}
		infos = append(infos, v)
	}
	return infos, nil
}

// writeInfos prints infos for a person: one block per key; with url, the
// first is the URL's key and the others its variants, one line each.
func writeInfos(w io.Writer, infos []guard.KeyInfo, url bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, ki := range infos {
		if url && i > 0 {
			if i == 1 {
				fmt.Fprintf(tw, "\nvariants of the URL (%d)\n", len(infos)-1)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", shownUpTo(ki.Key, maxShownKey), ki.State, windows(ki), size(ki))
			continue
		}
		if i > 0 {
			fmt.Fprintln(tw)
		}
		writeInfo(tw, ki)
	}
	return tw.Flush()
}

func writeInfo(w io.Writer, ki guard.KeyInfo) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	line("key", "%s", strconv.Quote(ki.Key))
	line("entry", "%s (slot %d)", strconv.Quote(ki.Entry), ki.Slot)
	line("state", "%s", ki.State)
	if ki.State != "missing" && ki.State != "corrupt" {
		line("fresh", "%s", left(ki.FreshLeft, "fresh-until"))
		line("stale", "%s", left(ki.StaleLeft, "stale-until, when Redis drops it"))
		line("age", "%s", round(ki.Age))
		line("size", "%d bytes", ki.Size)
		line("fence", "%d (its writer's)", ki.Fence)
	}
	if ki.LeaseFence != 0 {
		line("lease", "held, fence %d, %s left: a node is loading it", ki.LeaseFence, round(ki.LeaseTTL))
	} else {
		line("lease", "none")
	}
	if ki.BackupFence != 0 {
		line("backup", "held, fence %d, %s left: a waiter loads it beside the lease's holder (BackupLoad)", ki.BackupFence, round(ki.BackupTTL))
	}
	line("counter", "%d (the last fence minted)", ki.Counter)
	line("waiters", "%d node(s) waiting for its fill", ki.Waiters)
	if ki.Tag != "" {
		line("tag", "%s: %d key(s) filled since its last invalidation", strconv.Quote(ki.Tag), ki.TagSize)
		for _, k := range ki.TagKeys {
			line("", "  %s", shownUpTo(k, maxShownKey))
		}
	}
	if len(ki.Foreign) > 0 {
		line("foreign", "%s hold data the guard did not write", strings.Join(ki.Foreign, ", "))
	}
}

func left(d time.Duration, what string) string {
	if d <= 0 {
		return fmt.Sprintf("%s ago (%s)", round(-d), what)
	}
	return fmt.Sprintf("%s left (until %s)", round(d), what)
}

func windows(ki guard.KeyInfo) string {
	if ki.State == "missing" || ki.State == "corrupt" {
		return "-"
	}
	return fmt.Sprintf("fresh %s, stale %s", round(ki.FreshLeft), round(ki.StaleLeft))
}

func size(ki guard.KeyInfo) string {
	if ki.State == "missing" || ki.State == "corrupt" {
		return "-"
	}
	return strconv.Itoa(ki.Size) + " bytes"
}

func round(d time.Duration) time.Duration {
	if d > time.Second || d < -time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// jsonInfo is KeyInfo for scripts: durations in milliseconds.
type jsonInfo struct {
	Key        string     `json:"key"`
	KeyBytes   []byte     `json:"key_base64,omitempty"` // the key's bytes, when they are not UTF-8 (key then has U+FFFD in their place)
	Entry      string     `json:"entry"`
	EntryBytes []byte     `json:"entry_base64,omitempty"`
	Slot       int        `json:"slot"`
	Tag        string     `json:"tag,omitempty"`
	State      string     `json:"state"`
	FreshMs    int64      `json:"fresh_ms"`
	StaleMs    int64      `json:"stale_ms"`
	AgeMs      int64      `json:"age_ms"`
	Size       int        `json:"size"`
	Fence      int64      `json:"fence"`
	Lease      *jsonLease `json:"lease"`
	Backup     *jsonLease `json:"backup,omitempty"` // the backup lease (BackupLoad), when held
	Counter    int64      `json:"counter"`
	Waiters    int        `json:"waiters"`
	TagKeys    []string   `json:"tag_keys,omitempty"`
	TagKeysB64 [][]byte   `json:"tag_keys_base64,omitempty"` // the bytes of each of tag_keys, in order, when any is not UTF-8
	TagSize    int        `json:"tag_size,omitempty"`
	Foreign    []string   `json:"foreign,omitempty"`
	Timestamp  time.Time  `json:"read_at"`
}

type jsonLease struct {
	Fence int64 `json:"fence"`
	TTLMs int64 `json:"ttl_ms"`
}

// notUTF8 returns s's bytes when s is not valid UTF-8, which JSON
// cannot carry (encoding/json writes U+FFFD for each bad byte: two keys
// would read alike), and nil when it is.
func notUTF8(s string) []byte {
	if utf8.ValidString(s) {
		return nil
	}
	return []byte(s)
}

// allBytes returns the bytes of each of ss, when any of them is not valid
// UTF-8, and nil when all are.
func allBytes(ss []string) [][]byte {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			out := make([][]byte, len(ss))
			for i, s := range ss {
				out[i] = []byte(s)
			}
			return out
		}
	}
	return nil
}

func writeJSON(w io.Writer, infos []guard.KeyInfo) error {
	out := make([]jsonInfo, len(infos))
	now := time.Now().UTC()
	for i, ki := range infos {
		j := jsonInfo{Key: ki.Key, Entry: ki.Entry, Slot: ki.Slot, Tag: ki.Tag, State: ki.State,
			FreshMs: ki.FreshLeft.Milliseconds(), StaleMs: ki.StaleLeft.Milliseconds(), AgeMs: ki.Age.Milliseconds(),
			Size: ki.Size, Fence: ki.Fence, Counter: ki.Counter, Waiters: ki.Waiters,
			TagKeys: ki.TagKeys, TagSize: ki.TagSize, Foreign: ki.Foreign, Timestamp: now}
		j.KeyBytes, j.EntryBytes, j.TagKeysB64 = notUTF8(ki.Key), notUTF8(ki.Entry), allBytes(ki.TagKeys)
		if ki.LeaseFence != 0 {
			j.Lease = &jsonLease{Fence: ki.LeaseFence, TTLMs: ki.LeaseTTL.Milliseconds()}
		}
		if ki.BackupFence != 0 {
			j.Backup = &jsonLease{Fence: ki.BackupFence, TTLMs: ki.BackupTTL.Milliseconds()}
		}
		out[i] = j
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return errors.Join(errors.New("writing JSON"), err)
	}
	_, err = w.Write(append(escapeJSON(b), '\n'))
	return err
}
