package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// run releases: it plans the release of cfg.rev, checks each published
// module through a scratch proxy and, with cfg.tag, creates the tags.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	if cfg.bump {
		return bump(ctx, cfg, stdout)
	}
	work, err := os.MkdirTemp("", "stampede-release-")
	if err != nil {
		return err
	}
	t, mods, version, err := plan(ctx, cfg, work)
	if err != nil {
		return err
	}
	tags := printPlan(stdout, t, mods, version, cfg.tag)
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
	if err := checkPublished(ctx, ck, mods, version, proxy, stdout); err != nil {
		return err
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
	return tagPublished(ctx, cfg.repo, t, mods, version, tags, stdout)
}

// plan exports cfg.rev into work and returns its modules and the version
// to release, refusing a commit whose modules disagree on the version or
// the replace directives, or import another module's internal package.
func plan(ctx context.Context, cfg config, work string) (t *tree, mods []*module, version string, err error) {
	t, err = exportTree(ctx, cfg.repo, cfg.rev, filepath.Join(work, "src"))
	if err != nil {
		return nil, nil, "", err
	}
	mods, err = findModules(ctx, t)
	if err != nil {
		return nil, nil, "", err
	}
	version = cfg.version
	if version == "" {
		if version, err = inferVersion(mods); err != nil {
			return nil, nil, "", err
		}
	}
	p := consistent(mods, version)
	internal, err := internalImports(t, mods)
	if err != nil {
		return nil, nil, "", err
	}
	if p = append(p, internal...); len(p) > 0 {
		return nil, nil, "", fmt.Errorf("the modules of %.12s cannot be released as %s:\n\t%s", t.commit, version, strings.Join(p, "\n\t"))
	}
	return t, mods, version, nil
}

// printPlan prints the release and the tag of each published module, and
// returns those tags.
func printPlan(stdout io.Writer, t *tree, mods []*module, version string, tag bool) (tags []string) {
	mode := "dry run"
	if tag {
		mode = "tagging"
	}
	fmt.Fprintf(stdout, "release %s of %.12s (%s)\n", version, t.commit, mode)
	fmt.Fprintf(stdout, "  no module imports another's internal package outside its tests\n")
	var hidden []string
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
	return tags
}

// checkPublished has ck resolve and build each published module at
// version, offline, and fails if any does not.
func checkPublished(ctx context.Context, ck *checker, mods []*module, version, proxy string, stdout io.Writer) error {
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
	return nil
}

// tagPublished creates an annotated tag on t's commit for each published
// module, in the repository at repo.
func tagPublished(ctx context.Context, repo string, t *tree, mods []*module, version string, tags []string, stdout io.Writer) error {
	for _, m := range mods {
		if !m.published {
			continue
		}
		msg := fmt.Sprintf("%s %s", m.path, version)
		if _, err := git(ctx, repo, "tag", "-a", "-m", msg, m.tag(version), t.commit); err != nil {
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

// indent indents the lines after the first of a multi-line message.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n\t") }
