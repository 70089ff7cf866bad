package guard

import (
	"bytes"
	"context"
	"math"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/lua"

	"github.com/stampede-go/stampede/guard/internal/entry"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/hashtag"
	"github.com/stampede-go/stampede/internal/redistest"
)

// These tests hold the scripts and the Go codec to one entry format: what
// guard_fill.lua writes decodes, and the scripts' own header parser accepts
// exactly what decodeEntry accepts.

const scriptRetention = 24 * 60 * 60 * 1000 // ms

type scriptNames struct{ entry, lease, fence, waiters, inv string }

func newScriptNames(t *testing.T) scriptNames {
	base := hashtag.Base("stampede-test", redistest.Key(t, "k{}%"))
	return scriptNames{base, base + ":lease", base + ":fence", base + ":w", base + ":inv"}
}

func (n scriptNames) four() []string { return []string{n.entry, n.lease, n.fence, n.waiters} }
func (n scriptNames) five() []string { return []string{n.entry, n.lease, n.fence, n.waiters, n.inv} }

// read runs guard_read.lua with a lease and returns the raw entry, the
// Redis clock and x (0 fresh, > 0 our fence, < 0 busy).
func scriptRead(t *testing.T, rdb redis.UniversalClient, n scriptNames) (raw []byte, now, x int64) {
	t.Helper()
	res, err := lua.GuardRead.Run(context.Background(), rdb, n.four(), 5000, "", 0, scriptRetention).Slice()
	if err != nil {
		t.Fatalf("guard_read: %v", err)
	}
	if s, ok := res[0].(string); ok {
		raw = []byte(s)
	}
	return raw, res[1].(int64), res[2].(int64)
}

func scriptFill(t *testing.T, rdb redis.UniversalClient, n scriptNames, fence int64, payload []byte, fresh, stale, loadUS int64, flags, mode string) (written bool, now int64) {
	t.Helper()
	res, err := lua.GuardFill.Run(context.Background(), rdb, n.five(),
		fence, payload, fresh, stale, loadUS, flags, mode, 0, "", 86_400_000).Slice()
	if err != nil {
		t.Fatalf("guard_fill: %v", err)
	}
	return res[0].(int64) == 1, res[1].(int64)
}

func storedEntry(t *testing.T, rdb redis.UniversalClient, n scriptNames) entry.Entry {
	t.Helper()
	raw, err := rdb.Get(context.Background(), n.entry).Bytes()
	if err != nil {
		t.Fatalf("GET entry: %v", err)
	}
	e, err := entry.Decode(raw)
	if err != nil {
		t.Fatalf("entry %q written by guard_fill.lua: %v", raw, err)
	}
	return e
}

func TestFilledEntryDecodes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		n := newScriptNames(t)
		_, _, f := scriptRead(t, rdb, n)
		if f <= 0 {
			t.Fatalf("read did not take the lease: %d", f)
		}
		payload := append([]byte("~1,1,2,3,4,5,\n"), bytes.Repeat([]byte{0, '\n', 0xff}, 200)...)
		written, now := scriptFill(t, rdb, n, f, payload, 1500, 2500, 4321, "", "w")
		if !written {
			t.Fatal("not written")
		}
		want := entry.Entry{FreshUntil: now + 1500, StaleUntil: now + 4000, Written: now,
			LoadDur: 4321 * time.Microsecond, Fence: f, Value: payload}
		if got := storedEntry(t, rdb, n); !entry.Equal(got, want) {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
		// What guard_read returns decodes the same.
		raw, _, x := scriptRead(t, rdb, n)
		if x != 0 {
			t.Fatalf("read of a fresh entry: x = %d", x)
		}
		if got, err := entry.Decode(raw); err != nil || !entry.Equal(got, want) {
			t.Errorf("decoded read %+v, %v; want %+v", got, err, want)
		}

		_, now = scriptFill(t, rdb, n, f+1, nil, 1000, 0, 7, "n", "w")
		want = entry.Entry{FreshUntil: now + 1000, StaleUntil: now + 1000, Written: now,
			LoadDur: 7 * time.Microsecond, Fence: f + 1, Negative: true, Value: []byte{}}
		if got := storedEntry(t, rdb, n); !entry.Equal(got, want) {
			t.Errorf("negative: decoded %+v, want %+v", got, want)
		}

		n = newScriptNames(t)
		_, now = scriptFill(t, rdb, n, f, []byte("load failed: boom"), 2000, 0, 0, "e", "m")
		want = entry.Entry{FreshUntil: now + 2000, StaleUntil: now + 2000, Written: now,
			Fence: f, ErrMark: true, Value: []byte("load failed: boom")}
		if got := storedEntry(t, rdb, n); !entry.Equal(got, want) {
			t.Errorf("error marker: decoded %+v, want %+v", got, want)
		}

		n = newScriptNames(t)
		_, now = scriptFill(t, rdb, n, f, []byte("kept"), 1000, 3000, 0, "r", "w")
		want = entry.Entry{FreshUntil: now + 1000, StaleUntil: now + 4000, Written: now,
			Fence: f, MustRevalidate: true, Value: []byte("kept")}
		if got := storedEntry(t, rdb, n); !entry.Equal(got, want) {
			t.Errorf("must revalidate: decoded %+v, want %+v", got, want)
		}

		n = newScriptNames(t)
		_, now = scriptFill(t, rdb, n, f, nil, 1000, 3000, 0, "o", "w")
		want = entry.Entry{FreshUntil: now + 1000, StaleUntil: now + 4000, Written: now,
			Fence: f, Oversize: true, Value: []byte{}}
		if got := storedEntry(t, rdb, n); !entry.Equal(got, want) {
			t.Errorf("oversize marker: decoded %+v, want %+v", got, want)
		}
	})
}

// TestScriptsRejectCorrupt: every entry decodeEntry rejects counts as
// missing for guard_read.lua (it takes the lease although the header claims
// freshness) and never fences out a fill.
func TestScriptsRejectCorrupt(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		for _, c := range entry.Corrupt {
			n := newScriptNames(t)
			if err := rdb.Set(ctx, n.entry, c.Raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			raw, _, x := scriptRead(t, rdb, n)
			if string(raw) != c.Raw || x <= 0 {
				t.Errorf("%s: read = %q, x %d; want the raw value and the lease", c.Name, raw, x)
			}
			if written, _ := scriptFill(t, rdb, n, 0, []byte("v"), 1000, 0, 0, "", "w"); !written {
				t.Errorf("%s: a fill with fence 0 was fenced out by a corrupt entry", c.Name)
			}
		}
	})
}

// TestScriptsAcceptValid: every entry decodeEntry accepts is parsed by the
// scripts: judged fresh by guard_read.lua and fencing out lower fences in
// guard_fill.lua, compared exactly even above 2^53.
func TestScriptsAcceptValid(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const far = 4102444800000 // 2100-01-01
		for _, e := range []entry.Entry{
			{FreshUntil: far, StaleUntil: far, Fence: 1, Value: []byte("v")},
			{FreshUntil: far, StaleUntil: far + 1, Written: 1, LoadDur: time.Second, Fence: 1 << 40, Value: []byte{}},
			{FreshUntil: far, StaleUntil: far, Fence: 1<<62 + 7, Negative: true},
			{FreshUntil: far, StaleUntil: math.MaxInt64, Fence: 1<<53 + 1, ErrMark: true, Value: []byte("boom")},
			{FreshUntil: far, StaleUntil: far + 5, Fence: 3, MustRevalidate: true, Value: []byte("kept")},
			{FreshUntil: far, StaleUntil: far + 5, Fence: 4, Oversize: true, Value: []byte{}},
			{FreshUntil: far, StaleUntil: far, Fence: math.MaxInt64, Value: bytes.Repeat([]byte("~1,\n"), 100)},
			{FreshUntil: math.MaxInt64, StaleUntil: math.MaxInt64, Written: math.MaxInt64,
				LoadDur: time.Duration(entry.MaxLoadMicros) * time.Microsecond, Fence: 9},
		} {
			n := newScriptNames(t)
			raw := entry.Encode(e)
			if err := rdb.Set(ctx, n.entry, raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			got, _, x := scriptRead(t, rdb, n)
			if !bytes.Equal(got, raw) || x != 0 {
				t.Errorf("read of %q = %q, x %d; want it fresh", raw, got, x)
			}
			if w, _ := scriptFill(t, rdb, n, e.Fence-1, []byte("older"), 1000, 0, 0, "", "w"); w {
				t.Errorf("entry %q did not fence out fence %d", raw[:min(len(raw), 60)], e.Fence-1)
			}
			if w, _ := scriptFill(t, rdb, n, e.Fence, []byte("same"), 1000, 0, 0, "", "w"); !w {
				t.Errorf("entry %q fenced out its own fence %d", raw[:min(len(raw), 60)], e.Fence)
			}
		}

		// A valid entry past fresh_until is stale: the lease is taken.
		n := newScriptNames(t)
		raw := entry.Encode(entry.Entry{FreshUntil: 1, StaleUntil: far, Fence: 1, Value: []byte("old")})
		if err := rdb.Set(ctx, n.entry, raw, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, _, x := scriptRead(t, rdb, n); !bytes.Equal(got, raw) || x <= 0 {
			t.Errorf("read of a stale entry = %q, x %d; want it and the lease", got, x)
		}
	})
}
