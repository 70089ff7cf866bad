package guard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMergeHooks(t *testing.T) {
	var a, b []string
	m := MergeHooks(
		Hooks{Miss: func(k string) { a = append(a, "miss "+k) }},
		Hooks{},
		Hooks{Miss: func(k string) { b = append(b, "miss "+k) }, Breaker: func(open bool) { b = append(b, "breaker") }},
	)
	m.Miss("k")
	m.Breaker(true)
	if strings.Join(a, ",") != "miss k" || strings.Join(b, ",") != "miss k,breaker" {
		t.Fatalf("a=%v b=%v", a, b)
	}
	if m.Hit != nil {
		t.Fatal("Hit set although no Hooks had one")
	}
}

func TestLogHooks(t *testing.T) {
	_, rdb := redistest.Mini(t)
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	g := newGroup(t, rdb, Options{Hooks: LogHooks(l)})
	secret := "user:alice@example.com"
	if _, err := g.Do(ctxT(t), secret, func(context.Context) ([]byte, error) { return nil, errors.New("db down") }); err == nil {
		t.Fatal("want the loader's error")
	}
	if _, err := g.Do(ctxT(t), "other", func(context.Context) ([]byte, error) { return nil, ErrNotFound }); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "load failed") || !strings.Contains(out, "db down") {
		t.Fatalf("failed load not logged:\n%s", out)
	}
	if strings.Contains(out, "alice") {
		t.Fatalf("key leaked into the log:\n%s", out)
	}
	if strings.Count(out, "load failed") != 1 {
		t.Fatalf("ErrNotFound logged as a failure:\n%s", out)
	}
	LogHooks(l).Breaker(true)
	LogHooks(l).Breaker(false)
	if !strings.Contains(buf.String(), "breaker open") || !strings.Contains(buf.String(), "breaker closed") {
		t.Fatalf("breaker changes not logged:\n%s", buf.String())
	}
}
