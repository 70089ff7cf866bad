package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// checker builds scratch modules, outside the repository, that depend on
// one published module each, the way a user's program would: go get of
// the module at the release, a program importing its packages, go mod
// tidy, go build. The go command reads modules only from the local proxy
// folder and, for third-party modules, from the local module cache, into
// a module cache of its own (the releases checked must not land in the
// user's cache, which would serve them stale on the next run): no
// network.
type checker struct {
	work string   // scratch folder
	env  []string // the go command's environment
	log  io.Writer
}

// goSettings are the variables the checker sets, removed from the
// inherited environment first.
var goSettings = []string{
	"GOPROXY", "GOSUMDB", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOINSECURE", "GOVCS",
	"GOFLAGS", "GOWORK", "GOMODCACHE", "GOCACHE", "GOTOOLCHAIN", "GOENV", "GO111MODULE",
}

func newChecker(ctx context.Context, work, proxy string, log io.Writer) (*checker, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", exitDetail(err))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("go env: unexpected output %q", out)
	}
	userCache, buildCache := lines[0], lines[1]
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(goSettings, k)
	})
	env = append(env,
		// The release from the proxy folder; what it does not have
		// (third-party modules) from the user's module cache, laid out
		// as a proxy too. No "direct", no proxy.golang.org: no network.
		"GOPROXY="+fileURL(proxy)+","+fileURL(filepath.Join(userCache, "cache", "download")),
		"GOSUMDB=off", // the release is not in the checksum database yet
		"GONOSUMDB=", "GONOPROXY=", "GOPRIVATE=", "GOINSECURE=", "GOVCS=",
		"GOFLAGS=-mod=mod -modcacherw -trimpath", // -trimpath: builds share the user's build cache
		"GOWORK=off",
		"GOMODCACHE="+filepath.Join(work, "modcache"),
		"GOCACHE="+buildCache,
		"GOTOOLCHAIN=local",
		"GOENV=off", // the settings above, whatever the user's go env file says
		"GO111MODULE=on",
	)
	return &checker{work: work, env: env, log: log}, nil
}

func fileURL(dir string) string { return "file://" + filepath.ToSlash(dir) }

// check resolves and builds module m at version in a scratch module of
// its own, and returns what it found. own are the repository's modules: a
// dependent of m must get each of them that it needs at version, from
// m's own requirements.
func (c *checker) check(ctx context.Context, m *module, version string, own map[string]*module) (string, error) {
	dir := filepath.Join(c.work, "scratch", strings.ReplaceAll(m.name(), "/", "-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := c.goCmd(ctx, dir, "mod", "init", "example.com/releasecheck"); err != nil {
		return "", err
	}
	if _, err := c.goCmd(ctx, dir, "get", m.path+"@"+version); err != nil {
		return "", err
	}
	out, err := c.goCmd(ctx, dir, "list", "-f", `{{if .GoFiles}}{{.Name}} {{.ImportPath}}{{end}}`, m.path+"/...")
	if err != nil {
		return "", err
	}
	var pkgs, cmds []string
	for line := range strings.Lines(out) {
		name, p, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch {
		case slices.Contains(strings.Split(p, "/"), "internal"):
		case name == "main":
			cmds = append(cmds, p)
		default:
			pkgs = append(pkgs, p)
		}
	}
	switch {
	case len(pkgs) == 0 && len(cmds) > 0:
		// A module of commands: built as go install builds them.
		return c.checkCommands(ctx, dir, cmds, version, own)
	case len(pkgs) == 0:
		return "", fmt.Errorf("%s@%s: no package to import", m.path, version)
	}
	var src bytes.Buffer
	src.WriteString("// Command releasecheck imports every package of one module, as a user's program would.\npackage main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src.Bytes(), 0o644); err != nil {
		return "", err
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", os.DevNull, "."}} {
		if _, err := c.goCmd(ctx, dir, args...); err != nil {
			return "", err
		}
	}
	got, err := c.ownModules(ctx, dir, version, own, ".")
	if err != nil {
		return "", fmt.Errorf("a dependent of %s@%s %w", m.path, version, err)
	}
	return fmt.Sprintf("%d package(s) built; stampede modules in its graph, all at %s: %s",
		len(pkgs), version, strings.Join(got, ", ")), nil
}

// checkCommands builds the commands cmds of a module just got in the
// scratch module dir, as go install would, and checks the stampede
// modules they are built from.
func (c *checker) checkCommands(ctx context.Context, dir string, cmds []string, version string, own map[string]*module) (string, error) {
	for _, p := range cmds {
		if _, err := c.goCmd(ctx, dir, "build", "-o", os.DevNull, p); err != nil {
			return "", err
		}
	}
	got, err := c.ownModules(ctx, dir, version, own, cmds...)
	if err != nil {
		return "", fmt.Errorf("a build of %s %w", strings.Join(cmds, ", "), err)
	}
	return fmt.Sprintf("%d command(s) built; stampede modules in its graph, all at %s: %s",
		len(cmds), version, strings.Join(got, ", ")), nil
}

// ownModules returns the repository's modules that pkgs are built from in
// the scratch module dir, as selected (go list -m all would want every
// module's .info, which the module cache may lack), or says which is not
// at version.
func (c *checker) ownModules(ctx context.Context, dir, version string, own map[string]*module, pkgs ...string) ([]string, error) {
	out, err := c.goCmd(ctx, dir, append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	var got []string
	for line := range strings.Lines(out) {
		p, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		if own[p] == nil || slices.Contains(got, own[p].name()) {
			continue
		}
		if v != version {
			return nil, fmt.Errorf("gets %s %s, not %s", p, v, version)
		}
		got = append(got, own[p].name())
	}
	return got, nil
}

// clean empties the scratch module cache (its files are writable:
// -modcacherw).
func (c *checker) clean(ctx context.Context) {
	_, _ = c.goCmd(ctx, c.work, "clean", "-modcache")
}

// goCmd runs the go command in dir and returns its standard output; its
// standard error goes to the log, and into the error when it fails.
func (c *checker) goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, c.log)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("in %s: go %s: %v\n%s", dir, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// exitDetail adds a failed command's standard error to err.
func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
