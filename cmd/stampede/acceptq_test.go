package main

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
)

// acceptQueue returns how many connections wait in the accept queue of
// the loopback TCP listener of base (an http:// URL), read from
// /proc/net/tcp: for a listening socket the kernel reports that queue as
// rx_queue. A request the client wrote on such a connection has not
// reached the server yet: a graceful shutdown closes its listener and the
// kernel resets them. -1 when it cannot be read (not Linux).
func acceptQueue(t *testing.T, base string) int {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return -1
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local rem st tx_queue:rx_queue ...; st 0A is LISTEN
		if len(fs) < 5 || fs[3] != "0A" || !strings.HasSuffix(fs[1], want) {
			continue
		}
		_, rx, ok := strings.Cut(fs[4], ":")
		if !ok {
			return -1
		}
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			return -1
		}
		return int(n)
	}
	return -1
}
