package main

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of a module zip the go command accepts.
const (
	maxZipFile = 500 << 20 // total size of the files
	maxGoMod   = 16 << 20
	maxLicense = 16 << 20
)

// writeProxy lays out, under dir, a module proxy serving each published
// module of mods at version, with the content of t (the GOPROXY protocol:
// <escaped module path>/@v/list, <version>.info, .mod and .zip).
func writeProxy(t *tree, mods []*module, version, dir string) error {
	for _, m := range mods {
		if !m.published {
			continue
		}
		files, err := moduleFiles(t, m.dir)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name(), err)
		}
		v := filepath.Join(dir, filepath.FromSlash(escape(m.path)), "@v")
		if err := os.MkdirAll(v, 0o755); err != nil {
			return err
		}
		base := filepath.Join(v, escape(version))
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, t.time})
		if err != nil {
			return err
		}
		gomod, err := os.ReadFile(filepath.Join(t.dir, filepath.FromSlash(path.Join(m.dir, "go.mod"))))
		if err != nil {
			return err
		}
		for _, w := range []struct {
			name string
			data []byte
		}{
			{filepath.Join(v, "list"), []byte(version + "\n")},
			{base + ".info", info},
			{base + ".mod", gomod},
		} {
			if err := os.WriteFile(w.name, w.data, 0o644); err != nil {
				return err
			}
		}
		if err := writeZip(base+".zip", m.path+"@"+version, t.dir, files); err != nil {
			return fmt.Errorf("%s: %w", m.name(), err)
		}
	}
	return nil
}

// zipFile is one file of a module zip: its name in the module and its
// path in the tree.
type zipFile struct{ name, src string }

// moduleFiles returns the files of the module in folder dir of t, by the
// rules of module zips: a subfolder holding a go.mod is another module
// and left out with all it holds; a module in a subfolder without a
// LICENSE of its own gets the repository's. It fails on what the go
// command would refuse to extract: an invalid file name, two names equal
// but for case, a vendor folder (not supported here), a size over the
// limits.
func moduleFiles(t *tree, dir string) ([]zipFile, error) {
	var bounds []string // folders of the other modules
	for _, f := range t.files {
		if d := path.Dir(f); path.Base(f) == "go.mod" && d != "." && d != dir {
			bounds = append(bounds, d+"/")
		}
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	var files []zipFile
	var problems []string
	lower := map[string]string{}
	var total int64
	license := false
	for _, f := range t.files {
		if !strings.HasPrefix(f, prefix) || inAny(f, prefix, bounds) {
			continue
		}
		name := strings.TrimPrefix(f, prefix)
		if err := checkFilePath(name); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if other, ok := lower[strings.ToLower(name)]; ok {
			problems = append(problems, fmt.Sprintf("%q and %q differ only in case", other, name))
			continue
		}
		lower[strings.ToLower(name)] = name
		if name == "LICENSE" {
			license = true
		}
		files = append(files, zipFile{name, f})
	}
	if !license && dir != "" {
		if _, err := os.Stat(filepath.Join(t.dir, "LICENSE")); err == nil {
			files = append(files, zipFile{"LICENSE", "LICENSE"})
		}
	}
	for _, z := range files {
		st, err := os.Stat(filepath.Join(t.dir, filepath.FromSlash(z.src)))
		if err != nil {
			return nil, err
		}
		total += st.Size()
		switch {
		case z.name == "go.mod" && st.Size() > maxGoMod, z.name == "LICENSE" && st.Size() > maxLicense:
			problems = append(problems, fmt.Sprintf("%s: %d bytes, over the limit", z.name, st.Size()))
		}
	}
	if total > maxZipFile {
		problems = append(problems, fmt.Sprintf("%d bytes of files, over the %d of a module zip", total, maxZipFile))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("the go command would refuse its zip:\n\t%s", strings.Join(problems, "\n\t"))
	}
	return files, nil
}

// inAny reports whether file f, in the module whose files start with
// prefix, lies in one of the folders bounds that are inside that module.
func inAny(f, prefix string, bounds []string) bool {
	for _, b := range bounds {
		if strings.HasPrefix(b, prefix) && strings.HasPrefix(f, b) {
			return true
		}
	}
	return false
}

// writeZip writes the module zip name: every file under "<module>@<version>/".
func writeZip(name, prefix, src string, files []zipFile) (err error) {
	out, err := os.Create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	zw := zip.NewWriter(out)
	for _, f := range files {
		w, err := zw.Create(prefix + "/" + f.name)
		if err != nil {
			return err
		}
		in, err := os.Open(filepath.Join(src, filepath.FromSlash(f.src)))
		if err != nil {
			return err
		}
		_, err = io.Copy(w, in)
		in.Close()
		if err != nil {
			return err
		}
	}
	return zw.Close()
}

// checkFilePath reports a file name the go command refuses in a module
// zip: an empty, "." or ".." element, an element ending in a dot, a
// character outside letters, digits and !#$%&()+,-.=@[]^_{}~ and space,
// a name Windows reserves (CON, NUL, COM1, ...), or a vendor folder.
func checkFilePath(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("%q: not UTF-8", name)
	}
	for _, elem := range strings.Split(name, "/") {
		switch {
		case elem == "" || elem == "." || elem == "..":
			return fmt.Errorf("%q: empty, . or .. element", name)
		case strings.HasSuffix(elem, "."):
			return fmt.Errorf("%q: element %q ends in a dot", name, elem)
		case elem == "vendor":
			return fmt.Errorf("%q: vendor folders are not supported by this tool", name)
		}
		for _, r := range elem {
			if !fileNameRune(r) {
				return fmt.Errorf("%q: character %q not allowed", name, r)
			}
		}
		short, _, _ := strings.Cut(elem, ".")
		for _, bad := range []string{"CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9"} {
			if strings.EqualFold(short, bad) {
				return fmt.Errorf("%q: %q is reserved on Windows", name, elem)
			}
		}
	}
	return nil
}

// escape escapes a module path or version for the proxy's file names:
// each upper-case letter becomes '!' and its lower case.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fileNameRune reports whether r may appear in a file name of a module
// zip: ASCII letters, digits and the punctuation above, or a letter.
func fileNameRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
			strings.ContainsRune("!#$%&()+,-.=@[]^_{}~ ", r)
	}
	return unicode.IsLetter(r)
}
