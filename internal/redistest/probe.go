package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// waitReady polls s until it answers as process p, p exits, or startTimeout
// passes. A probe in flight is abandoned as soon as p exits: the port may be
// held by someone who accepts connections and never answers.
func (s *Server) waitReady(p *process) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := probe(ctx, s.Addr, s.cfg.password, s.tlsConf, p.cmd.Process.Pid)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready (%v)", p.err)
		case <-ctx.Done():
			select {
			case <-p.done:
				return fmt.Errorf("exited before it was ready (%v)", p.err)
			default:
			}
			return fmt.Errorf("not ready after %v: %v", startTimeout, err)
		case <-tick.C:
		}
	}
}

// probe checks that the server at addr accepts commands and is process pid,
// not some other server that got the port. It speaks just enough RESP to
// send AUTH and INFO, over TLS when tlsConf is set (the handshake is part of
// the probe: a server is not ready before it completes one).
func probe(ctx context.Context, addr, password string, tlsConf *tls.Config, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var conn net.Conn
	var err error
	if tlsConf != nil {
		d := tls.Dialer{Config: tlsConf}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	rw := bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
	if password != "" {
		if _, err := respCall(rw, "AUTH", password); err != nil {
			return err
		}
	}
	info, err := respCall(rw, "INFO", "server")
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by process %q, not ours (%d)", addr, got, pid)
	}
	return nil
}

// respCall sends one command and reads a simple-string, error, integer or
// bulk-string reply.
func respCall(rw *bufio.ReadWriter, args ...string) (string, error) {
	fmt.Fprintf(rw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rw, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rw.Flush(); err != nil {
		return "", err
	}
	line, err := rw.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rw, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), field+":"); ok {
			return v
		}
	}
	return ""
}
