package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/stampede-go/stampede":     "github.com/stampede-go/stampede",
		"github.com/Shopify/toxiproxy/v2":     "github.com/!shopify/toxiproxy/v2",
		"v1.0.0-RC1":                          "v1.0.0-!r!c1",
		"github.com/BurntSushi/toml/internal": "github.com/!burnt!sushi/toml/internal",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckFilePath(t *testing.T) {
	for _, ok := range []string{"go.mod", "guard/testdata/fuzz/FuzzX/0123abcd", ".ci/run", "a b/c~d.go", "café.md"} {
		if err := checkFilePath(ok); err != nil {
			t.Errorf("checkFilePath(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"a//b", "a/./b", "x.", "a:b", "q?.go", "star*.go", "con.txt", "x/NUL", "vendor/x/y.go", "a\\b", "\xff"} {
		if err := checkFilePath(bad); err == nil {
			t.Errorf("checkFilePath(%q) = nil, want an error", bad)
		}
	}
}

func TestTag(t *testing.T) {
	root, gin := &module{}, &module{dir: "middleware/gin"}
	if got := root.tag("v0.1.0"); got != "v0.1.0" {
		t.Errorf("root tag = %q", got)
	}
	if got := gin.tag("v0.1.0"); got != "middleware/gin/v0.1.0" {
		t.Errorf("nested tag = %q", got)
	}
}

func TestRelPath(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"middleware/gin", "", "../.."},
		{"bench", "", ".."},
		{"internal/chaos", "internal/faults", "../faults"},
		{"", "sub", "./sub"},
	} {
		if got := relPath(c.from, c.to); got != c.want {
			t.Errorf("relPath(%q, %q) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

// mods returns a root module and an adapter requiring it at v, with the
// development replace.
func mods(v string) []*module {
	root := &module{path: "example.com/r", published: true, requires: map[string]string{}, replaces: map[string]string{}}
	ad := &module{dir: "ad", path: "example.com/r/ad", published: true,
		requires: map[string]string{"example.com/r": v, "example.com/other": "v1.2.3"},
		replaces: map[string]string{"example.com/r": "../"}}
	return []*module{root, ad}
}

func TestConsistent(t *testing.T) {
	if p := consistent(mods("v0.1.0"), "v0.1.0"); len(p) != 0 {
		t.Fatalf("consistent modules: %q", p)
	}
	if v, err := inferVersion(mods("v0.1.0")); err != nil || v != "v0.1.0" {
		t.Errorf("inferVersion = %q, %v; want v0.1.0", v, err)
	}
	for _, c := range []struct {
		name    string
		version string
		edit    func([]*module)
		want    string
	}{
		{"stale requirement", "v0.2.0", func([]*module) {}, "ad requires example.com/r v0.1.0, not v0.2.0"},
		{"placeholder", "v0.0.0", func(m []*module) { m[1].requires["example.com/r"] = "v0.0.0" }, "placeholder"},
		{"not semver", "0.1.0", func(m []*module) { m[1].requires["example.com/r"] = "0.1.0" }, "not vMAJOR"},
		{"v2 needs a path", "v2.0.0", func(m []*module) { m[1].requires["example.com/r"] = "v2.0.0" }, "major 0 or 1"},
		{"no replace", "v0.1.0", func(m []*module) { delete(m[1].replaces, "example.com/r") }, "want replace example.com/r => .."},
		{"replace elsewhere", "v0.1.0", func(m []*module) { m[1].replaces["example.com/r"] = "../../r" }, "want replace"},
		{"path off its folder", "v0.1.0", func(m []*module) { m[1].path = "example.com/r/adapter" }, "want example.com/r/ad"},
		{"published needs unpublished", "v0.1.0", func(m []*module) { m[0].published = false }, "ad is published but requires root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms := mods("v0.1.0")
			c.edit(ms)
			p := consistent(ms, c.version)
			if !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, c.want) }) {
				t.Errorf("problems %q, want one containing %q", p, c.want)
			}
		})
	}
	m := mods("v0.1.0")
	m = append(m, &module{dir: "b", path: "example.com/r/b", requires: map[string]string{"example.com/r": "v0.2.0"}})
	if _, err := inferVersion(m); err == nil || !strings.Contains(err.Error(), "different versions") {
		t.Errorf("inferVersion of disagreeing modules: %v", err)
	}
}

func TestModuleFiles(t *testing.T) {
	dir := t.TempDir()
	files := []string{
		"go.mod", "LICENSE", "doc.go", "guard/guard.go", "guard/testdata/mod/go.mod", "guard/testdata/mod/x.go",
		"middleware/gin/go.mod", "middleware/gin/gin.go", "middleware/internal/engine.go",
		"middleware/gin/sub/go.mod", "middleware/gin/sub/s.go",
	}
	for _, f := range files {
		write(t, filepath.Join(dir, f), "x")
	}
	tr := &tree{dir: dir, files: files}
	names := func(dir string) []string {
		t.Helper()
		zs, err := moduleFiles(tr, dir)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, z := range zs {
			n = append(n, z.name)
		}
		slices.Sort(n)
		return n
	}
	if got, want := names(""), []string{"LICENSE", "doc.go", "go.mod", "guard/guard.go", "middleware/internal/engine.go"}; !slices.Equal(got, want) {
		t.Errorf("root module files %q, want %q", got, want)
	}
	// The repository's LICENSE goes with a module that has none.
	if got, want := names("middleware/gin"), []string{"LICENSE", "gin.go", "go.mod"}; !slices.Equal(got, want) {
		t.Errorf("middleware/gin files %q, want %q", got, want)
	}

	tr.files = append(tr.files, "Doc.go")
	write(t, filepath.Join(dir, "Doc.go"), "x")
	if _, err := moduleFiles(tr, ""); err == nil || !strings.Contains(err.Error(), "differ only in case") {
		t.Errorf("names equal but for case: %v", err)
	}
}

func write(t *testing.T, name, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// repo makes a git repository holding a root module example.com/r and a
// module example.com/r/ad requiring it at v0.1.0 (replace ../), committed.
func repo(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH", tool)
		}
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module example.com/r\n\ngo 1.26.0\n")
	write(t, filepath.Join(dir, "r.go"), "// Package r is the core.\npackage r\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n")
	write(t, filepath.Join(dir, "ad", "go.mod"), "module example.com/r/ad\n\ngo 1.26.0\n\nrequire example.com/r v0.1.0\n\nreplace example.com/r => ../\n")
	write(t, filepath.Join(dir, "ad", "ad.go"), "// Package ad adapts r.\npackage ad\n\nimport \"example.com/r\"\n\n// Hi greets.\nfunc Hi() string { return r.Hello() }\n")
	write(t, filepath.Join(dir, "CHANGELOG.md"), "# Changelog\n\n## [0.1.0] - Unreleased\n")
	gitRun(t, dir, "init", "-q")
	commit(t, dir, "first")
	return dir
}

func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func commit(t *testing.T, dir, msg string) {
	t.Helper()
	gitRun(t, dir, "add", "-A")
	gitRun(t, dir, "commit", "-q", "-m", msg)
}

func runRelease(t *testing.T, cfg config) (string, error) {
	t.Helper()
	var out, errs bytes.Buffer
	err := run(context.Background(), cfg, &out, &errs)
	return out.String() + errs.String(), err
}

func TestRunDryRun(t *testing.T) {
	dir := repo(t)
	out, err := runRelease(t, config{repo: dir, rev: "HEAD"})
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, want := range []string{"release v0.1.0 of", "v0.1.0 ", "ad/v0.1.0", "ok   root", "ok   ad", "all at v0.1.0: root, ad", "dry run: no tag created", "-tag would refuse"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if tags := gitRun(t, dir, "tag", "--list"); tags != "" {
		t.Errorf("a dry run created tags %q", tags)
	}
}

// TestRunUncommitted: a package the adapter needs exists only in the
// working tree. This repository's build finds it (replace); the release,
// made of the commit, does not have it, and the check says so.
func TestRunUncommitted(t *testing.T) {
	dir := repo(t)
	write(t, filepath.Join(dir, "ad", "ad.go"), "package ad\n\nimport \"example.com/r/extra\"\n\n// Hi greets.\nfunc Hi() string { return extra.X }\n")
	commit(t, dir, "ad uses extra")
	write(t, filepath.Join(dir, "extra", "extra.go"), "package extra\n\n// X is not committed.\nconst X = \"x\"\n")
	build := exec.Command("go", "build", "./...")
	build.Dir = filepath.Join(dir, "ad")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the adapter does not build in the working tree: %v\n%s", err, out)
	}
	out, err := runRelease(t, config{repo: dir, rev: "HEAD"})
	if err == nil || !strings.Contains(out, "FAIL ad") || !strings.Contains(out, "example.com/r/extra") {
		t.Fatalf("release of a commit missing a package: err %v\n%s", err, out)
	}
	if !strings.Contains(out, "ok   root") {
		t.Errorf("the root module should still resolve:\n%s", out)
	}
}

func TestRunTag(t *testing.T) {
	dir := repo(t)
	if out, err := runRelease(t, config{repo: dir, rev: "HEAD", tag: true}); err == nil || !strings.Contains(err.Error(), "CHANGELOG.md has no section") {
		t.Fatalf("-tag without a dated CHANGELOG section: %v\n%s", err, out)
	}
	write(t, filepath.Join(dir, "CHANGELOG.md"), "# Changelog\n\n## [0.1.0] - 2025-07-01\n")
	commit(t, dir, "changelog")
	out, err := runRelease(t, config{repo: dir, rev: "HEAD", tag: true})
	if err != nil {
		t.Fatalf("-tag: %v\n%s", err, out)
	}
	head := gitRun(t, dir, "rev-parse", "HEAD")
	for _, tag := range []string{"v0.1.0", "ad/v0.1.0"} {
		if got := gitRun(t, dir, "rev-parse", tag+"^{commit}"); got != head {
			t.Errorf("tag %s at %s, want HEAD %s", tag, got, head)
		}
	}
	if !strings.Contains(out, "git push origin v0.1.0 ad/v0.1.0") {
		t.Errorf("no push command in:\n%s", out)
	}
	if _, err := runRelease(t, config{repo: dir, rev: "HEAD", tag: true}); err == nil || !strings.Contains(err.Error(), "tags exist already") {
		t.Errorf("-tag again: %v, want a refusal", err)
	}
}

func TestBump(t *testing.T) {
	dir := repo(t)
	out, err := runRelease(t, config{repo: dir, bump: true, version: "v0.2.0"})
	if err != nil {
		t.Fatalf("-bump: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ad", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "require example.com/r v0.2.0") || !strings.Contains(string(b), "replace example.com/r => ../") {
		t.Errorf("ad/go.mod after -bump v0.2.0:\n%s", b)
	}
}
