// Command release tags every module of the stampede repository for one
// release, after checking that each published module resolves the way a
// program depending on it would fetch it.
//
// The root module is tagged vX.Y.Z; a module in a subfolder is tagged with
// the folder in front (middleware/gin/vX.Y.Z), which is where the go
// command looks for it. Every module requires the others at the release
// it is tagged with, so a dependent of one adapter gets the core at the
// same release; replace directives, which only this repository's builds
// read, point the requirements at the checkout for development.
//
// Usage (through release.sh, from anywhere):
//
//	release.sh [-rev REV] [-keep] [-v] [VERSION]   dry run: the plan and the check
//	release.sh -tag [-rev REV] VERSION              the same, then create the tags
//	release.sh -bump VERSION                        require VERSION between the modules
//
// VERSION defaults to the version the modules require of each other. The
// check exports REV (default HEAD) with git archive, builds a module proxy
// folder from it (each published module at VERSION: @v/list, .info, .mod,
// .zip) and, in a scratch module per published module, runs go get,
// go mod tidy and go build of a program importing all its packages, with
// GOPROXY set to that folder and the local module cache only: no network.
// Before that, it refuses a commit whose modules disagree on the version
// or the replace directives, or in which a module's non-test code imports
// another module's internal package (whose names may change in any
// release). -tag creates annotated tags on REV in the local repository
// and prints the push command; it refuses when a tag exists, or when
// CHANGELOG.md has no dated section for VERSION.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// config is what the flags say.
type config struct {
	repo    string // repository root
	rev     string // commit to tag
	version string // "" = inferred from the go.mod files
	bump    bool   // rewrite the requirements to version, then stop
	tag     bool   // create the tags (else dry run)
	keep    bool   // keep the scratch folder
	verbose bool   // the go command's progress to stderr
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("release", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release.sh [-tag | -bump] [-rev REV] [-keep] [-v] [VERSION]\n\n"+
			"Checks that every published module of the repository resolves at VERSION the\n"+
			"way a dependent fetches it (offline), and prints the tags (dry run) or creates\n"+
			"them (-tag).\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.repo, "repo", ".", "repository root")
	fs.StringVar(&cfg.rev, "rev", "HEAD", "commit to tag")
	fs.BoolVar(&cfg.tag, "tag", false, "create the tags after the check (local; push them yourself)")
	fs.BoolVar(&cfg.bump, "bump", false, "make every module require the others at VERSION (in the working tree), then stop")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the scratch folder (proxy, modules) and print where")
	fs.BoolVar(&cfg.verbose, "v", false, "show the go command's output")
	_ = fs.Parse(os.Args[1:])
	switch fs.NArg() {
	case 0:
	case 1:
		cfg.version = fs.Arg(0)
	default:
		fs.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	if cfg.bump {
		return bump(ctx, cfg, stdout)
	}
	work, err := os.MkdirTemp("", "stampede-release-")
	if err != nil {
		return err
	}
	t, err := exportTree(ctx, cfg.repo, cfg.rev, filepath.Join(work, "src"))
	if err != nil {
		return err
	}
	mods, err := findModules(ctx, t)
	if err != nil {
		return err
	}
	version := cfg.version
	if version == "" {
		if version, err = inferVersion(mods); err != nil {
			return err
		}
	}
	p := consistent(mods, version)
	internal, err := internalImports(t, mods)
	if err != nil {
		return err
	}
	if p = append(p, internal...); len(p) > 0 {
		return fmt.Errorf("the modules of %.12s cannot be released as %s:\n\t%s", t.commit, version, strings.Join(p, "\n\t"))
	}

	mode := "dry run"
	if cfg.tag {
		mode = "tagging"
	}
	fmt.Fprintf(stdout, "release %s of %.12s (%s)\n", version, t.commit, mode)
	fmt.Fprintf(stdout, "  no module imports another's internal package outside its tests\n")
	var tags, hidden []string
	for _, m := range mods {
		if !m.published {
			hidden = append(hidden, m.name())
			continue
		}
		fmt.Fprintf(stdout, "  %-32s %s\n", m.tag(version), m.path)
		tags = append(tags, m.tag(version))
	}
	if len(hidden) > 0 {
		fmt.Fprintf(stdout, "  not published: %s\n", strings.Join(hidden, ", "))
	}
	existing, err := existingTags(ctx, cfg.repo, tags)
	if err != nil {
		return err
	}
	changelog := changelogDated(t, version)

	log := io.Discard
	if cfg.verbose {
		log = stderr
	}
	proxy := filepath.Join(work, "proxy")
	if err := writeProxy(t, mods, version, proxy); err != nil {
		return err
	}
	ck, err := newChecker(ctx, work, proxy, log)
	if err != nil {
		return err
	}
	defer func() {
		ck.clean(context.WithoutCancel(ctx))
		if cfg.keep {
			fmt.Fprintf(stderr, "scratch folder kept: %s (proxy: %s)\n", work, proxy)
			return
		}
		if rerr := os.RemoveAll(work); err == nil && rerr != nil {
			err = rerr
		}
	}()
	fmt.Fprintf(stdout, "check: each published module resolved and built by a scratch module, offline (GOPROXY=%s,<module cache>)\n", fileURL(proxy))
	own := ownPaths(mods)
	var failed []string
	for _, m := range mods {
		if !m.published {
			continue
		}
		start := time.Now()
		what, err := ck.check(ctx, m, version, own)
		if err != nil {
			fmt.Fprintf(stdout, "  FAIL %-26s %v\n", m.name(), indent(err.Error()))
			failed = append(failed, m.name())
			continue
		}
		fmt.Fprintf(stdout, "  ok   %-26s %s (%.1fs)\n", m.name(), what, time.Since(start).Seconds())
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d module(s) do not resolve as published: %s", len(failed), strings.Join(failed, ", "))
	}

	if !cfg.tag {
		for _, e := range existing {
			fmt.Fprintf(stdout, "note: tag %s exists already: -tag would refuse\n", e)
		}
		if changelog != nil {
			fmt.Fprintf(stdout, "note: %v: -tag would refuse\n", changelog)
		}
		fmt.Fprintf(stdout, "dry run: no tag created. To tag %.12s: release/release.sh -tag %s\n", t.commit, version)
		return nil
	}
	if len(existing) > 0 {
		return fmt.Errorf("tags exist already: %s (a published version cannot change; release another)", strings.Join(existing, ", "))
	}
	if changelog != nil {
		return changelog
	}
	for _, m := range mods {
		if !m.published {
			continue
		}
		msg := fmt.Sprintf("%s %s", m.path, version)
		if _, err := git(ctx, cfg.repo, "tag", "-a", "-m", msg, m.tag(version), t.commit); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tagged %s\n", m.tag(version))
	}
	fmt.Fprintf(stdout, "push them together: git push origin %s\n", strings.Join(tags, " "))
	return nil
}

// existingTags returns those of tags the repository has already.
func existingTags(ctx context.Context, repo string, tags []string) ([]string, error) {
	var have []string
	for _, tag := range tags {
		out, err := git(ctx, repo, "tag", "--list", tag)
		if err != nil {
			return nil, err
		}
		if out != "" {
			have = append(have, tag)
		}
	}
	return have, nil
}

// changelogDated reports a CHANGELOG.md of t without a dated section for
// version ("## [0.1.0] - 2025-06-30", as Keep a Changelog writes it).
func changelogDated(t *tree, version string) error {
	b, err := os.ReadFile(filepath.Join(t.dir, "CHANGELOG.md"))
	if err != nil {
		return fmt.Errorf("CHANGELOG.md: %w", err)
	}
	re := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(strings.TrimPrefix(version, "v")) + `\] - \d{4}-\d{2}-\d{2}\s*$`)
	if !re.Match(b) {
		return fmt.Errorf("CHANGELOG.md has no section \"## [%s] - YYYY-MM-DD\"", strings.TrimPrefix(version, "v"))
	}
	return nil
}

// bump makes every requirement between the modules of the working tree
// name version, with go mod edit.
func bump(ctx context.Context, cfg config, stdout io.Writer) error {
	if !semver.MatchString(cfg.version) {
		return errors.New("-bump needs a version vMAJOR.MINOR.PATCH[-pre] with major 0 or 1")
	}
	abs, err := filepath.Abs(cfg.repo)
	if err != nil {
		return err
	}
	files, err := worktreeGoMods(abs)
	if err != nil {
		return err
	}
	t := &tree{dir: abs, commit: "working tree", files: files}
	mods, err := findModules(ctx, t)
	if err != nil {
		return err
	}
	own := ownPaths(mods)
	for _, m := range mods {
		var edits []string
		for p, v := range m.requires {
			if own[p] != nil && v != cfg.version {
				edits = append(edits, "-require="+p+"@"+cfg.version)
			}
		}
		if len(edits) == 0 {
			continue
		}
		file := filepath.Join(abs, filepath.FromSlash(m.dir), "go.mod")
		if err := goModEdit(ctx, file, edits); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s\n", m.name(), strings.Join(edits, " "))
	}
	fmt.Fprintf(stdout, "commit the go.mod files, then: release/release.sh %s\n", cfg.version)
	return nil
}

// indent indents the lines after the first of a multi-line message.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n\t") }
