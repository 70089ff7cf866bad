package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// unpublished are the modules of the repository that are never tagged,
// by folder: nobody outside the repository imports them. Every other
// module found is published, so a module added later is tagged and
// checked unless it is listed here.
var unpublished = map[string]string{
	"bench":              "benchmarks",
	"examples/fencedsql": "an example to read, with its database driver",
	"internal/chaos":     "fault suite",
	"internal/faults":    "fault suite",
	"release":            "this tool",
}

// module is one go.mod of the repository.
type module struct {
	dir       string // slash-separated folder in the repository; "" for the root
	path      string // module path
	published bool
	requires  map[string]string // module path → version, every requirement
	replaces  map[string]string // module path → replacement (folder or module)
}

// tag returns the tag of m at version: "v0.1.0" for the root module,
// "middleware/gin/v0.1.0" for the module in middleware/gin, as the go
// command expects of a module in a subfolder of its repository.
func (m *module) tag(version string) string {
	if m.dir == "" {
		return version
	}
	return m.dir + "/" + version
}

// name is how m is named in messages: its folder, or "root".
func (m *module) name() string {
	if m.dir == "" {
		return "root"
	}
	return m.dir
}

// goModJSON is the part of `go mod edit -json` read here.
type goModJSON struct {
	Module  struct{ Path string }
	Require []struct{ Path, Version string }
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path string }
	}
}

// findModules reads every go.mod of t. A go.mod under a testdata folder
// is not a module of the repository (but still bounds what the module
// around it holds: see moduleFiles). The root module comes first.
func findModules(ctx context.Context, t *tree) ([]*module, error) {
	var mods []*module
	for _, f := range t.files {
		if path.Base(f) != "go.mod" || slices.Contains(strings.Split(f, "/"), "testdata") {
			continue
		}
		dir := path.Dir(f)
		if dir == "." {
			dir = ""
		}
		gm, err := readGoMod(ctx, filepath.Join(t.dir, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		m := &module{dir: dir, path: gm.Module.Path, requires: map[string]string{}, replaces: map[string]string{}}
		_, hidden := unpublished[dir]
		m.published = !hidden
		for _, r := range gm.Require {
			m.requires[r.Path] = r.Version
		}
		for _, r := range gm.Replace {
			m.replaces[r.Old.Path] = r.New.Path
		}
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].dir < mods[j].dir })
	if len(mods) == 0 || mods[0].dir != "" {
		return nil, fmt.Errorf("no go.mod at the root of %s", t.commit)
	}
	return mods, nil
}

func readGoMod(ctx context.Context, file string) (*goModJSON, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "edit", "-json", file).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod edit -json %s: %w", file, exitDetail(err))
	}
	var gm goModJSON
	if err := json.Unmarshal(out, &gm); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &gm, nil
}

// semver is a release version the go command takes for a tag: major 0 or
// 1 (v2 and later need a /v2 module path), no build metadata.
var semver = regexp.MustCompile(`^v(0|1)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// inferVersion returns the version every requirement between the
// repository's modules names: the release they are ready for.
func inferVersion(mods []*module) (string, error) {
	own := ownPaths(mods)
	seen := map[string][]string{}
	for _, m := range mods {
		for p, v := range m.requires {
			if own[p] != nil {
				seen[v] = append(seen[v], m.name())
			}
		}
	}
	switch len(seen) {
	case 0:
		return "", fmt.Errorf("no module requires another: name the version")
	case 1:
		for v := range seen {
			return v, nil
		}
	}
	var b strings.Builder
	for _, v := range slices.Sorted(maps.Keys(seen)) {
		fmt.Fprintf(&b, "\n\t%s: %s", v, strings.Join(seen[v], ", "))
	}
	return "", fmt.Errorf("the modules require different versions of each other; name the version (and -bump to it):%s", b.String())
}

// consistent lists what keeps mods from being released together at
// version: a module whose path does not match its folder (its tag would
// not be found), a requirement between them at another version, or
// without a replace directive to the checkout (this repository's builds
// would fetch it), or a published module requiring an unpublished one
// (its dependents could not resolve it).
func consistent(mods []*module, version string) []string {
	var problems []string
	switch {
	case !semver.MatchString(version):
		problems = append(problems, fmt.Sprintf("version %q is not vMAJOR.MINOR.PATCH[-pre] with major 0 or 1", version))
	case version == "v0.0.0":
		// The placeholder of a requirement that only a replace directive
		// resolves: a dependent's build asks the proxy for it and fails.
		problems = append(problems, "v0.0.0 is a placeholder, not a release: bump the modules to a real version (release/release.sh -bump v0.1.0)")
	}
	root := mods[0].path
	own := ownPaths(mods)
	for _, m := range mods {
		if want := path.Join(root, m.dir); m.path != want {
			problems = append(problems, fmt.Sprintf("%s: module path %s, want %s (the tag %s names that folder)", m.name(), m.path, want, m.tag(version)))
		}
		for _, p := range slices.Sorted(maps.Keys(m.requires)) {
			dep := own[p]
			if dep == nil {
				continue
			}
			if v := m.requires[p]; v != version {
				problems = append(problems, fmt.Sprintf("%s requires %s %s, not %s (release/release.sh -bump %s)", m.name(), p, v, version, version))
			}
			want := relPath(m.dir, dep.dir)
			if r, ok := m.replaces[p]; !ok || path.Clean(r) != want {
				problems = append(problems, fmt.Sprintf("%s: want replace %s => %s, for this repository's builds", m.name(), p, want))
			}
			if m.published && !dep.published {
				problems = append(problems, fmt.Sprintf("%s is published but requires %s, which is not", m.name(), dep.name()))
			}
		}
	}
	return problems
}

// ownPaths maps the module paths of mods to their modules.
func ownPaths(mods []*module) map[string]*module {
	own := map[string]*module{}
	for _, m := range mods {
		own[m.path] = m
	}
	return own
}

// relPath returns the relative path from folder from to folder to, both
// slash-separated and relative to the repository ("" is its root), in
// the form go.mod replace directives take ("../..", "../faults").
func relPath(from, to string) string {
	r, err := filepath.Rel(filepath.FromSlash("/"+from), filepath.FromSlash("/"+to))
	if err != nil {
		return to
	}
	r = filepath.ToSlash(r)
	if !strings.HasPrefix(r, "..") {
		r = "./" + r
	}
	return r
}
