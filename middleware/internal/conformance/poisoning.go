package conformance

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/guard"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Poisoning runs the cache-poisoning suite against a, each row on a
// miniredis of its own: the claim is about keys, not Redis.
//
// Each row sends an attacker's request, then a victim's, to one server,
// over a real TCP connection and as raw bytes, so net/http parses them as
// it would in production. The origin behind the adapter reflects every
// input an application may read (Host, the absolute-form target, path and
// raw path, the query as the frameworks parse it, forwarding and method
// override headers, credentials, body). What the victim must see is what
// the same victim request gets from a server with an empty cache ("fresh"),
// so a row passes only if the attacker's request changed nothing for the
// victim; rows marked shared also require the victim to be served from
// the cache, showing the key merges only what the origin cannot tell apart.
func Poisoning(t *testing.T, a Adapter) {
	PoisoningOn(t, a, func(t testing.TB) redis.UniversalClient {
		_, rdb := redistest.Mini(t)
		return rdb
	})
}

// PoisoningCluster runs the suite on the test binary's shared Redis
// Cluster (redistest.SharedCluster: the package's TestMain must call
// redistest.Main). It is skipped with -short.
func PoisoningCluster(t *testing.T, a Adapter) {
	if testing.Short() {
		t.Skip("-short: the poisoning suite on a Redis Cluster")
	}
	PoisoningOn(t, a, func(t testing.TB) redis.UniversalClient {
		return redistest.SharedCluster(t).Client(t)
	})
}

// PoisoningOn is Poisoning with the Redis client returned by client.
func PoisoningOn(t *testing.T, a Adapter, client func(testing.TB) redis.UniversalClient) {
	for _, row := range poisoningRows() {
		t.Run(a.Name+"/"+row.name, func(t *testing.T) {
			t.Parallel()
			row.run(t, a, client(t))
		})
	}
	t.Run(a.Name+"/behind a reverse proxy", func(t *testing.T) {
		t.Parallel()
		behindProxy(t, a, client(t))
	})
}

// sees is what the victim of a row must be served.
type sees int

const (
	// fresh: exactly what it is served with the cache empty.
	fresh sees = iota
	// shared: the attacker's stored response (a hit), which must also be
	// what it is served with the cache empty.
	shared
)

type poisonRow struct {
	name             string
	cfg              Config
	origin           reflector
	attacker, victim string // raw HTTP/1.1 requests (see req)
	want             sees
}

func (row poisonRow) run(t *testing.T, a Adapter, rdb redis.UniversalClient) {
	var calls atomic.Int64
	srv := row.server(t, a, rdb, &calls)
	alone := row.server(t, a, rdb, new(atomic.Int64))
	atk := send(t, srv, row.attacker)
	got := send(t, srv, row.victim)
	want := send(t, alone, row.victim)
	if got.status != want.status || got.body != want.body {
		t.Errorf("victim served %d %q (%s)\nalone it is served %d %q\nthe attacker got %d %q",
			got.status, got.body, got.cacheStatus, want.status, want.body, atk.status, atk.body)
	}
	switch row.want {
	case fresh:
		if atk.status == want.status && atk.body == want.body {
			t.Errorf("the row proves nothing: the attacker's request gets the victim's answer %q", atk.body)
		}
	case shared:
		if got.cacheStatus != "stampede; hit" || calls.Load() != 1 {
			t.Errorf("victim not served from the cache: Cache-Status %q, %d origin calls, want a hit after 1", got.cacheStatus, calls.Load())
		}
	}
}

var poisonSeq atomic.Uint64

// server starts a server of a with the row's config and origin, on a Group
// of its own.
func (row poisonRow) server(t *testing.T, a Adapter, rdb redis.UniversalClient, calls *atomic.Int64) string {
	t.Helper()
	ns := "poison" + strconv.FormatUint(poisonSeq.Add(1), 10) + ":"
	g, err := guard.New(rdb, guard.Options{Namespace: ns, FreshFor: time.Hour, RedisTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	srv := httptest.NewServer(a.New(g, row.cfg, row.origin.handler(calls)))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

type answer struct {
	status      int
	body        string
	cacheStatus string
}

// send writes raw on a new connection to addr and reads the response.
func send(t *testing.T, addr, raw string) answer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", raw, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the response to %q: %v", raw, err)
	}
	return answer{resp.StatusCode, string(body), resp.Header.Get("Cache-Status")}
}
