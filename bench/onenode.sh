#!/usr/bin/env bash
# onenode.sh: one guardhttp node and one reference node (net/http answering
# a constant, see constantNode in peers_node_test.go), each a process at
# GOMAXPROCS=1 pinned to CPU 0, driven in turn by wrk pinned to CPU 1, in
# front of one origin and one redis-server. Prints, per round, each node's
# requests and CPU per request (from /proc), and their ratios.
#
#	bash bench/onenode.sh [rounds] [seconds]
#
# With PERF=1 it records each node's profile instead of timing rounds
# (perf record -g, to /tmp/onenode.KIND.perf; read it with
# perf report -i FILE --children). Needs wrk, redis-server and, for PERF,
# perf; loopback only. A manual measurement, not part of CI.
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-6}
secs=${2:-4}
work=$(mktemp -d)
pids=()
nodes=()
fds=()
cleanup() {
	# Close the nodes' stdin first, so that they stop on their own (and
	# write their STAMPEDE_BENCH_PEER_PROFILE), then stop what is left.
	for f in "${fds[@]}"; do exec {f}>&-; done
	for p in "${nodes[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
	--pidfile "$work/redis.pid" >/dev/null
for _ in $(seq 50); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
redis-cli -p "$rport" ping | grep -q PONG

go test -c -o "$work/bench.test" . >/dev/null
# The origin: the peers' response (10 KiB, max-age=2, an ETag), no delay.
cat >"$work/origin.go" <<'EOF'
package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
)

func main() {
	body := bytes.Repeat([]byte("x"), 10<<10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=2, stale-while-revalidate=30")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "text/plain")
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(body)
	}))
}
EOF
(cd "$work" && go mod init origin >/dev/null 2>&1 && go build -o origin .)
mkfifo "$work/origin.out"
taskset -c 1 "$work/origin" >"$work/origin.out" &
pids+=($!)
read -r origin <"$work/origin.out"

# start KIND: a node, its stdin held open by a fifo (it exits when closed).
declare -A addr pid
start() {
	mkfifo "$work/$1.in" "$work/$1.out"
	STAMPEDE_BENCH_PEER_NODE="$1 127.0.0.1:$rport onenode$RANDOM: http://$origin" GOMAXPROCS=1 \
		taskset -c 0 "$work/bench.test" -test.run '^$' <"$work/$1.in" >"$work/$1.out" &
	pid[$1]=$!
	pids+=($!)
	nodes+=($!)
	exec {fd}>"$work/$1.in"
	fds+=("$fd")
	read -r a <"$work/$1.out"
	addr[$1]=$a
}
start guardhttp
start nethttp
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; } # clock ticks
hz=$(getconf CLK_TCK)

for k in guardhttp nethttp; do wrk -t1 -c8 -d1s "http://${addr[$k]}/hot" >/dev/null; done
if [ "${PERF:-}" = 1 ]; then
	for k in guardhttp nethttp; do
		taskset -c 1 wrk -t1 -c8 -d"$((secs + 1))"s "http://${addr[$k]}/hot" >"$work/wrk.$k" &
		w=$!
		perf record -e cpu-clock -F 4000 -g -o "/tmp/onenode.$k.perf" -p "${pid[$k]}" -- sleep "$secs" 2>/dev/null >/dev/null
		wait "$w"
		echo "$k: $(grep Requests/sec "$work/wrk.$k"), profile /tmp/onenode.$k.perf"
	done
	exit 0
fi
echo "| round | guardhttp requests | µs CPU / request | reference requests | µs CPU / request | requests ratio | CPU ratio |"
echo "|--:|--:|--:|--:|--:|--:|--:|"
for r in $(seq "$rounds"); do
	line="| $r"
	declare -A n c
	for k in guardhttp nethttp; do
		c0=$(cpu "${pid[$k]}")
		n[$k]=$(taskset -c 1 wrk -t1 -c8 -d"$secs"s "http://${addr[$k]}/hot" | awk '/requests in/{print $1}')
		c[$k]=$(( ($(cpu "${pid[$k]}") - c0) * 1000000 / hz ))
		line+=" | ${n[$k]} | $(echo "scale=1; ${c[$k]}/${n[$k]}" | bc)"
	done
	line+=" | $(echo "scale=3; ${n[guardhttp]}/${n[nethttp]}" | bc)"
	line+=" | $(echo "scale=3; (${c[guardhttp]}/${n[guardhttp]})/(${c[nethttp]}/${n[nethttp]})" | bc) |"
	echo "$line"
done
