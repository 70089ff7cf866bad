package security_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestTrackingGrantRevealsNames backs what docs/security.md says of the
// in-process tier's grant: Redis checks no key permission on a BCAST
// tracking prefix, so a user limited to ~a:* and refused a GET of b:{x}
// is sent the name of a b: key another client writes.
func TestTrackingGrantRevealsNames(t *testing.T) {
	const name = "tracker"
	srv := redistest.Start(t, redistest.WithUser(name, userPassword,
		"~a:*", "&__redis__:invalidate", "+get", "+client|id", "+client|tracking", "+subscribe"))
	conn, err := net.DialTimeout("tcp", srv.Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	// RESP3, so the reports come on this connection as push messages.
	send(t, conn, "HELLO", "3", "AUTH", name, userPassword)
	skipReply(t, r)
	send(t, conn, "GET", "b:{x}")
	if line := readLine(t, r); !strings.Contains(line, "NOPERM") {
		t.Fatalf("GET b:{x} as %s: %q, want NOPERM", name, line)
	}
	send(t, conn, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "b:")
	if line := readLine(t, r); line != "+OK" {
		t.Fatalf("CLIENT TRACKING ON BCAST PREFIX b: as %s: %q, want +OK", name, line)
	}
	const secret = "b:{session:alice@example.com}"
	if err := srv.Client(t).Set(t.Context(), secret, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The report is a push of "invalidate" and the key's name; the
	// connection's deadline bounds the wait.
	var seen bytes.Buffer
	for !strings.Contains(seen.String(), secret) {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no report of %s to a user refused it (read so far %q): %v", secret, seen.String(), err)
		}
		seen.WriteString(line)
	}
}

// send writes a command in RESP.
func send(t *testing.T, conn net.Conn, args ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
}

// readLine reads one line of a reply, without its CRLF.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(line, "\r\n")
}

// skipReply reads HELLO's reply, a map, to its end: its first line says
// how many pairs, each pair a simple line or a bulk string's two, bar the
// "modules" array, which is empty on the servers the tests run.
func skipReply(t *testing.T, r *bufio.Reader) {
	t.Helper()
	head := readLine(t, r)
	var n int
	if _, err := fmt.Sscanf(head, "%%%d", &n); err != nil {
		t.Fatalf("HELLO 3: %q, want a map", head)
	}
	for range 2 * n {
		if line := readLine(t, r); strings.HasPrefix(line, "$") {
			readLine(t, r)
		}
	}
}
