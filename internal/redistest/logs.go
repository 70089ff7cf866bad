package redistest

import (
	"io"
	"os"
	"path/filepath"
	"strings"
)

// logMark records the sizes of the log files, to read what comes after.
type logMark [2]int64

func (s *Server) logFiles() [2]string {
	return [2]string{filepath.Join(s.Dir, outName), filepath.Join(s.Dir, logName)}
}

func (s *Server) logMark() logMark {
	var m logMark
	for i, f := range s.logFiles() {
		if fi, err := os.Stat(f); err == nil {
			m[i] = fi.Size()
		}
	}
	return m
}

// logSince returns what was written to stdout/stderr and to the log file
// after m (at most the last 64 KiB of each).
func (s *Server) logSince(m logMark) string {
	const max = 64 << 10
	var b strings.Builder
	for i, name := range s.logFiles() {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err == nil {
			off := m[i]
			if fi.Size()-off > max {
				off = fi.Size() - max
			}
			if data, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off)); err == nil {
				b.Write(data)
			}
		}
		f.Close()
	}
	return b.String()
}

// logTail returns the last n lines of the server's output and log.
func (s *Server) logTail(n int) string { return lastLines(s.logSince(logMark{}), n) }

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
