package bench

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

// BenchmarkInvalidationChannel measures the ways a node can learn that
// another node changed a key, as the guard's in-process tier needs to: a
// writer runs a fill-shaped script (SET the entry, DEL the lease) on one
// client, a listener on another connection waits for word of it. One
// change at a time, so each latency is that of one message, while 8
// goroutines keep the node(s) busy with GETs (hit load). Candidates:
//
//	none        the script alone (the baseline for Redis CPU)
//	tracking    CLIENT TRACKING ON REDIRECT <own id> BCAST PREFIX ns on one
//	            RESP2 connection per master, subscribed to
//	            __redis__:invalidate: Redis reports every write under the
//	            prefix (the lease's DEL too)
//	publish     the script PUBLISHes the entry's name on a namespace
//	            channel (standalone); on a cluster, PUBLISH travels over the
//	            cluster bus to every node
//	spublish    (cluster) the script SPUBLISHes on the channel of the
//	            key's slot; the listener SSUBSCRIBEs the 16384 slot
//	            channels, on a connection per master
//
// Reported: p50 and p99 of the time from the script's reply on the writer
// to the message on the listener (0 when it came first), the share of
// messages that arrived before the reply, messages and names per change,
// and Redis CPU (user+sys, every master) per change.
//
//	cd bench && go test -run '^$' -bench InvalidationChannel -benchtime 1x -v .
func BenchmarkInvalidationChannel(b *testing.B) {
	for _, topo := range []string{"standalone", "cluster"} {
		for _, cand := range []string{"none", "tracking", "publish", "spublish"} {
			if cand == "spublish" && topo == "standalone" {
				continue
			}
			b.Run(topo+"/"+cand, func(b *testing.B) {
				var r channelRun
				for b.Loop() {
					r = runChannel(b, topo, cand, 2000)
				}
				if cand != "none" {
					b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
					b.ReportMetric(float64(r.max.Microseconds())/1000, "max-ms")
					b.ReportMetric(r.early, "before-reply")
					b.ReportMetric(r.msgs, "msgs/change")
					b.ReportMetric(r.names, "names/change")
				}
				b.ReportMetric(r.cpuUS, "redis-cpu-us/change")
				b.Logf("| %s | %s | %.2f ms | %.2f ms | %.2f ms | %.0f%% | %.2f | %.2f | %.1f µs |", topo, cand,
					float64(r.p50.Microseconds())/1000, float64(r.p99.Microseconds())/1000, float64(r.max.Microseconds())/1000,
					100*r.early, r.msgs, r.names, r.cpuUS)
			})
		}
	}
}

type channelRun struct {
	p50, p99, max time.Duration
	early         float64 // share of messages before the writer's reply
	msgs, names   float64 // per change
	cpuUS         float64 // Redis CPU per change, µs
}

// fillShaped stands for guard_fill.lua: it stores the entry, drops the
// lease and, for the publishing candidates, tells the listeners.
var fillShaped = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
redis.call('DEL', KEYS[2])
if ARGV[2] ~= '' then
  redis.call(ARGV[2], ARGV[3], KEYS[1])
end
return 1`)

// slotTags[s] is a string whose Redis Cluster slot is s: the hash tag of
// slot s's channel.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, 16384)
	left := len(tags)
	for i := 0; left > 0; i++ {
		s := strconv.Itoa(i)
		if k := crc16(s) % 16384; tags[k] == "" {
			tags[k] = s
			left--
		}
	}
	return tags
})

// crc16 is Redis Cluster's key hash (CRC16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func runChannel(b *testing.B, topo, cand string, changes int) channelRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		writer  redis.UniversalClient
		masters []*redis.Options // one per master, to listen and to read CPU
	)
	switch topo {
	case "standalone":
		srv := redistest.Shared(b)
		writer = srv.Client(b)
		masters = []*redis.Options{{Addr: srv.Addr}}
	default:
		cl := redistest.SharedCluster(b)
		cc := cl.Client(b)
		writer = cc
		for _, m := range cl.Masters {
			masters = append(masters, &redis.Options{Addr: m.Addr})
		}
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
			b.Fatal(err)
		}
	}
	ns := uniqueKey("inv") + ":"
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = ns + "{k" + strconv.Itoa(i) + "}"
	}

	// The listener: got[name] is signalled on each message naming it.
	var (
		mu           sync.Mutex
		got          = map[string]chan time.Time{}
		msgs, nnames atomic.Int64
	)
	for _, k := range keys {
		got[k] = make(chan time.Time, 16)
	}
	heard := func(name string, at time.Time) {
		nnames.Add(1)
		mu.Lock()
		ch := got[name]
		mu.Unlock()
		if ch != nil {
			select {
			case ch <- at:
			default:
			}
		}
	}
	var subs []*redis.PubSub
	listen := func(ps *redis.PubSub, want int) {
		subs = append(subs, ps)
		confirmed := 0
		for confirmed < want {
			m, err := ps.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := m.(*redis.Subscription); ok {
				confirmed++
			}
		}
		go func() {
			for {
				m, err := ps.Receive(context.Background())
				if err != nil {
					return
				}
				at := time.Now()
				msg, ok := m.(*redis.Message)
				if !ok {
					continue
				}
				msgs.Add(1)
				switch {
				case len(msg.PayloadSlice) > 0:
					for _, n := range msg.PayloadSlice {
						heard(n, at)
					}
				default:
					heard(msg.Payload, at)
				}
			}
		}()
	}
	defer func() {
		for _, ps := range subs {
			_ = ps.Close()
		}
	}()
	var verb, channel func(key string) string
	switch cand {
	case "tracking":
		for _, m := range masters {
			c := redis.NewClient(&redis.Options{Addr: m.Addr, Protocol: 2, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
				id, err := cn.ClientID(ctx).Result()
				if err != nil {
					return err
				}
				return cn.Do(ctx, "CLIENT", "TRACKING", "on", "REDIRECT", id, "BCAST", "PREFIX", ns).Err()
			}})
			b.Cleanup(func() { _ = c.Close() })
			listen(c.Subscribe(ctx, "__redis__:invalidate"), 1)
		}
	case "publish":
		verb = func(string) string { return "PUBLISH" }
		channel = func(string) string { return ns + "inv" }
		c := redis.NewClient(&redis.Options{Addr: masters[0].Addr, Protocol: 2})
		b.Cleanup(func() { _ = c.Close() })
		listen(c.Subscribe(ctx, ns+"inv"), 1)
	case "spublish":
		tags := slotTags()
		verb = func(string) string { return "SPUBLISH" }
		channel = func(key string) string {
			i, j := strings.IndexByte(key, '{'), strings.IndexByte(key, '}')
			return ns + "inv{" + tags[crc16(key[i+1:j])%16384] + "}"
		}
		cc := writer.(*redis.ClusterClient)
		shards, err := cc.ClusterShards(ctx).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, sh := range shards {
			addr := ""
			for _, nd := range sh.Nodes {
				if nd.Role == "master" && nd.Health == "online" {
					addr = net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10))
				}
			}
			if addr == "" {
				continue
			}
			c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
			b.Cleanup(func() { _ = c.Close() })
			ps := c.Subscribe(ctx)
			n := 0
			for _, r := range sh.Slots {
				for s := r.Start; s <= r.End; s++ {
					if err := ps.SSubscribe(ctx, ns+"inv{"+tags[s]+"}"); err != nil {
						b.Fatal(err)
					}
					n++
				}
			}
			listen(ps, n)
		}
	}

	// Hit load: GETs of the keys, 8 goroutines.
	stop := make(chan struct{})
	var load sync.WaitGroup
	for range 8 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = writer.Get(ctx, keys[rand.IntN(len(keys))]).Err()
			}
		})
	}

	cpu := func() float64 {
		var sum float64
		for _, m := range masters {
			c := redis.NewClient(&redis.Options{Addr: m.Addr})
			info, err := c.Info(ctx, "cpu").Result()
			_ = c.Close()
			if err != nil {
				b.Fatal(err)
			}
			for _, line := range strings.Split(info, "\r\n") {
				k, v, _ := strings.Cut(line, ":")
				if k == "used_cpu_sys" || k == "used_cpu_user" {
					f, _ := strconv.ParseFloat(v, 64)
					sum += f
				}
			}
		}
		return sum
	}
	// CPU is measured with the hit load stopped; latency under it.
	var lat []time.Duration
	early := 0
	run := func(n int, measure bool) {
		for i := range n {
			key := keys[i%len(keys)]
			args := []any{strconv.Itoa(i), "", ""}
			if verb != nil {
				args = []any{strconv.Itoa(i), verb(key), channel(key)}
			}
			mu.Lock()
			ch := got[key]
			mu.Unlock()
			for len(ch) > 0 {
				<-ch
			}
			if err := fillShaped.Run(ctx, writer, []string{key, key + ":lease"}, args...).Err(); err != nil {
				b.Fatal(err)
			}
			ret := time.Now()
			if cand == "none" {
				continue
			}
			select {
			case at := <-ch:
				if !measure {
					continue
				}
				d := at.Sub(ret)
				if d < 0 {
					early++
					d = 0
				}
				lat = append(lat, d)
			case <-time.After(5 * time.Second):
				b.Fatalf("%s: no message for change %d of %s", cand, i, key)
			}
		}
	}
	run(200, false) // warm-up
	run(changes, true)
	close(stop)
	load.Wait()
	m0, n0 := msgs.Load(), nnames.Load()
	c0 := cpu()
	run(changes, false)
	c1 := cpu()
	m1, n1 := msgs.Load(), nnames.Load()
	return channelRun{
		p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), max: quantile(lat, 1),
		early: float64(early) / float64(max(len(lat), 1)),
		msgs:  float64(m1-m0) / float64(changes), names: float64(n1-n0) / float64(changes),
		cpuUS: (c1 - c0) * 1e6 / float64(changes),
	}
}
