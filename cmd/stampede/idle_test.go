package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestIdleConnectionsClosed: the proxy set only ReadHeaderTimeout, so a
// client's keep-alive connection, idle after its answer, stayed open for
// ever (Go clears the read deadline between requests): 300 such
// connections held 300 of the proxy's file descriptors. -idle-timeout
// (2m by default) closes them.
func TestIdleConnectionsClosed(t *testing.T) {
	srv := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	bases, _ := proxies(t, 1, srv.Addr, namespace(t), up.URL, "-idle-timeout", "300ms")
	var conns []net.Conn
	for range 50 {
		c, err := net.Dial("tcp", strings.TrimPrefix(bases[0], "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /idle HTTP/1.1\r\nHost: site.example\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		conns = append(conns, c)
	}
	open := 0
	// Closed by the proxy within the idle timeout: each read ends with EOF
	// well before this deadline, one for all.
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d idle connections still open 10 s after their answer, with -idle-timeout 300ms", open, len(conns))
	}
}

// TestIdleTimeoutRefusesZero: -idle-timeout 0 would keep idle connections
// for ever; it is refused as a usage error (exit 2).
func TestIdleTimeoutRefusesZero(t *testing.T) {
	for _, v := range []string{"0", "-1s"} {
		_, errs, code, _ := runIn(t, 10*time.Second, "proxy", "-redis", "127.0.0.1:1", "-upstream", "http://127.0.0.1:1", "-listen", "127.0.0.1:0", "-idle-timeout", v)
		if code != 2 || !strings.Contains(errs, "-idle-timeout") {
			t.Errorf("-idle-timeout %s: exit %d, %.120q; want 2 and a message naming the flag", v, code, errs)
		}
	}
}
