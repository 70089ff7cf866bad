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
	"strings"
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
