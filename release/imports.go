package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// internalImports lists, as problems, the imports in non-test Go files of
// t of a package with an "internal" path element that another module of
// the repository holds. The go command allows them (the paths share the
// prefix before "internal"), but such a package's names may change in any
// release of its module, so a module published at one version would break
// against the other's next. Test files may import test kits
// (internal/redistest): a dependent never builds them.
func internalImports(t *tree, mods []*module) ([]string, error) {
	var problems []string
	fset := token.NewFileSet()
	for _, f := range t.files {
		if !goSource(f) {
			continue
		}
		from := moduleOfFile(mods, f)
		if from == nil {
			continue
		}
		src, err := os.ReadFile(filepath.Join(t.dir, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, spec := range af.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil || !slices.Contains(strings.Split(p, "/"), "internal") {
				continue
			}
			if to := moduleOfImport(mods, p); to != nil && to != from {
				problems = append(problems, fmt.Sprintf("%s (module %s) imports %s, internal to module %s: make what it needs public there",
					f, from.name(), p, to.name()))
			}
		}
	}
	return problems, nil
}

// goSource reports a Go file the go command builds into a package for a
// dependent: not a test, not under testdata or a folder it ignores.
func goSource(f string) bool {
	if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
		return false
	}
	for _, el := range strings.Split(path.Dir(f), "/") {
		if el == "testdata" || strings.HasPrefix(el, ".") || strings.HasPrefix(el, "_") {
			return false
		}
	}
	return true
}

// moduleOfFile returns the module holding file f: the one with the
// longest folder above it.
func moduleOfFile(mods []*module, f string) *module {
	var best *module
	for _, m := range mods {
		if (m.dir == "" || strings.HasPrefix(f, m.dir+"/")) && (best == nil || len(m.dir) > len(best.dir)) {
			best = m
		}
	}
	return best
}

// moduleOfImport returns the module of the repository that holds the
// package p, or nil for another repository's.
func moduleOfImport(mods []*module, p string) *module {
	var best *module
	for _, m := range mods {
		if (p == m.path || strings.HasPrefix(p, m.path+"/")) && (best == nil || len(m.path) > len(best.path)) {
			best = m
		}
	}
	return best
}
