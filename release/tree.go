package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// tree is the content of one commit, exported to a folder: what the tags
// of a release would hold, whatever the working tree has.
type tree struct {
	dir    string    // the folder holding the files
	commit string    // full commit id
	time   time.Time // commit time, the versions' time in the proxy
	files  []string  // regular files, slash-separated, sorted
}

// exportTree writes the files of rev in repo into dst with git archive.
// Symbolic links are left out, as module zips leave them out.
func exportTree(ctx context.Context, repo, rev, dst string) (*tree, error) {
	commit, err := git(ctx, repo, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return nil, err
	}
	when, err := git(ctx, repo, "show", "-s", "--format=%cI", commit)
	if err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339, when)
	if err != nil {
		return nil, fmt.Errorf("commit time %q: %w", when, err)
	}
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	files, rerr := untar(out, dst)
	if rerr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("git archive %s: %v: %s", rev, err, strings.TrimSpace(stderr.String()))
	}
	if rerr != nil {
		return nil, fmt.Errorf("git archive %s: %w", rev, rerr)
	}
	sort.Strings(files)
	return &tree{dir: dst, commit: commit, time: t.UTC(), files: files}, nil
}

// untar writes the regular files of a tar stream under dst and returns
// their names.
func untar(r io.Reader, dst string) ([]string, error) {
	var files []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue // directories, links, git archive's pax header
		}
		name := path.Clean(h.Name)
		if !filepath.IsLocal(filepath.FromSlash(name)) {
			return nil, fmt.Errorf("file %q outside the tree", h.Name)
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		files = append(files, name)
	}
}

// git runs git in repo and returns its trimmed output.
func git(ctx context.Context, repo string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
