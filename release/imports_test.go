package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInternalImports: a module's non-test code may import its own
// internal packages and other modules' public ones; another module's
// internal package only from tests.
func TestInternalImports(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                  "module example.com/r\n",
		"internal/kit/kit.go":     "package kit\n",
		"mw/internal/engine/e.go": "package engine\n",
		"mw/public/p.go":          "package public\n\nimport _ \"example.com/r/mw/internal/engine\"\n",
		"mw/ad/go.mod":            "module example.com/r/mw/ad\n",
		"mw/ad/ad.go":             "package ad\n\nimport (\n\t_ \"example.com/r/mw/internal/engine\"\n\t_ \"example.com/r/mw/public\"\n\t_ \"example.com/r/mw/ad/internal/own\"\n)\n",
		"mw/ad/internal/own/o.go": "package own\n",
		"mw/ad/ad_test.go":        "package ad\n\nimport _ \"example.com/r/internal/kit\"\n",
		"mw/ad/testdata/x/x.go":   "package x\n\nimport _ \"example.com/r/internal/kit\"\n",
		"mw/ad/_skip/s.go":        "package s\n\nimport _ \"example.com/r/internal/kit\"\n",
		"mw/ad/other/other.go":    "package other\n\nimport _ \"golang.org/x/tools/internal/event\"\n",
	}
	var names []string
	for name, src := range files {
		write(t, filepath.Join(dir, filepath.FromSlash(name)), src)
		names = append(names, name)
	}
	slices.Sort(names)
	tr := &tree{dir: dir, commit: "test", files: names}
	mods, err := findModules(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := internalImports(tr, mods)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.Contains(got[0], "mw/ad/ad.go (module mw/ad) imports example.com/r/mw/internal/engine, internal to module root") {
		t.Errorf("problems %q, want one: mw/ad/ad.go importing the root's mw/internal/engine", got)
	}
}

// TestRepositoryImportsNoOtherModulesInternal holds this repository to
// the rule: no module's non-test code imports a package internal to
// another module (the HTTP engine, the Cache-Status vocabulary and the
// metrics labels are public packages of the root module for that).
func TestRepositoryImportsNoOtherModulesInternal(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := worktreeFiles(root, func(name string) bool { return name == "go.mod" || strings.HasSuffix(name, ".go") })
	if err != nil {
		t.Fatal(err)
	}
	tr := &tree{dir: root, commit: "working tree", files: files}
	mods, err := findModules(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 5 {
		t.Fatalf("found %d modules in %s: not this repository", len(mods), root)
	}
	got, err := internalImports(tr, mods)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		t.Error(p)
	}
}
