package main

import (
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
)

// worktreeGoMods returns the go.mod files under root, slash-separated and
// relative to it, skipping hidden folders (.git) as the go command does.
func worktreeGoMods(root string) ([]string, error) {
	return worktreeFiles(root, func(name string) bool { return name == "go.mod" })
}

// goModEdit runs go mod edit with edits on file.
func goModEdit(ctx context.Context, file string, edits []string) error {
	args := append(append([]string{"mod", "edit"}, edits...), file)
	if err := exec.CommandContext(ctx, "go", args...).Run(); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), exitDetail(err))
	}
	return nil
}

// worktreeFiles returns the files under root whose names keep accepts,
// slash-separated and relative to it, skipping hidden folders (.git).
func worktreeFiles(root string, keep func(name string) bool) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && keep(d.Name()) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}
