package tier

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stampede-go/stampede/guard/internal/entry"
)

var tierModelRuns = flag.Int("tier.runs", 2000, "histories TestLocalTierModel generates")

// TestLocalTierModel checks the in-process tier's order rule against a
// model of what can happen around it, over generated histories: a key
// (or two, which may share a change counter) in a simulated Redis whose
// versions rise; reads that take their ticket, are answered by Redis at
// some later moment and whose replies come back in any order; writes by
// another node whose reports arrive later, in order; copies that expire,
// are evicted or flushed. Each read is a call: it begins when its ticket
// is taken and ends when its reply is offered to the tier and returned
// (kept or not); a get served from the tier begins and ends at once. The
// rule: no call returns a version older than one a call that ended before
// it began returned. Each history prints its seed on failure.
func TestLocalTierModel(t *testing.T) {
	for seed := range uint64(*tierModelRuns) {
		if msg := tierHistory(seed); msg != "" {
			t.Fatalf("seed %d: %s", seed, msg)
		}
	}
}

func tierHistory(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x7e5))
	entries := 1 + rng.IntN(3)
	lt := newStore(Config{Namespace: "ns:", Entries: entries, Bytes: 1 << 20, TTL: time.Hour})
	lt.SetLive(true)
	keys := []string{"a", "b"}[:1+rng.IntN(2)]
	type redisKey struct {
		version  int64
		reports  []int64 // writes whose report has not reached the tier yet
		returned int64   // the newest version a call that ended returned
	}
	type joiner struct {
		floor int64 // the newest version returned before it began
	}
	type read struct {
		key      string
		tk       Ticket
		answered bool
		version  int64
		floor    int64 // the newest version returned before it began
		joiners  []joiner
	}
	rk := map[string]*redisKey{}
	for _, k := range keys {
		rk[k] = &redisKey{version: 1}
	}
	var reads []*read
	var log []string
	check := func(k string, v int64, floor int64, how string) string {
		log = append(log, fmt.Sprintf("%s %s v%d", how, k, v))
		if v < floor {
			return fmt.Sprintf("%s returned v%d after a call that ended before it began returned v%d\n%v", k, v, floor, log)
		}
		rk[k].returned = max(rk[k].returned, v)
		return ""
	}
	for range 60 + rng.IntN(60) {
		k := keys[rng.IntN(len(keys))]
		r := rk[k]
		switch op := rng.IntN(12); op {
		case 0, 1: // a read is sent
			reads = append(reads, &read{key: k, tk: lt.Ticket(entryName(k)), floor: r.returned})
			log = append(log, "send "+k)
		case 2, 3: // Redis answers a read sent before
			var open []*read
			for _, rd := range reads {
				if !rd.answered {
					open = append(open, rd)
				}
			}
			if len(open) > 0 {
				rd := open[rng.IntN(len(open))]
				rd.answered, rd.version = true, rk[rd.key].version
			}
		case 4: // a reply comes back: offered to the tier, then returned
			for i, rd := range reads {
				if !rd.answered {
					continue
				}
				if rng.IntN(2) == 0 && i < len(reads)-1 {
					continue
				}
				reads = append(reads[:i], reads[i+1:]...)
				e := entry.Entry{Fence: rd.version, Written: rd.version, Value: []byte("v")}
				if rng.IntN(4) == 0 {
					// an answer the tier does not keep (stale, negative)
					lt.Seen(rd.key, entryName(rd.key), &e)
				} else {
					lt.Keep(rd.key, entryName(rd.key), rd.tk, &e, time.Hour, 0, rng.IntN(3) == 0)
				}
				if msg := check(rd.key, rd.version, rd.floor, "reply"); msg != "" {
					return msg
				}
				// Calls that joined this read (a flight), perhaps after it
				// was sent: the value is theirs only if current; else each
				// reads for itself, which Redis answers at once.
				name := entryName(rd.key)
				for _, jn := range rd.joiners {
					if lt.Current(name, rd.tk, &e) {
						if msg := check(rd.key, rd.version, jn.floor, "joined"); msg != "" {
							return msg
						}
						continue
					}
					v := rk[rd.key].version
					tk := lt.Ticket(name)
					e2 := entry.Entry{Fence: v, Written: v, Value: []byte("v")}
					lt.Keep(rd.key, name, tk, &e2, time.Hour, 0, false)
					if msg := check(rd.key, v, jn.floor, "re-read"); msg != "" {
						return msg
					}
				}
				break
			}
		case 5: // another node writes
			r.version++
			r.reports = append(r.reports, r.version)
			log = append(log, fmt.Sprintf("write %s v%d", k, r.version))
		case 6: // the oldest report of a write reaches the tier
			if len(r.reports) > 0 {
				r.reports = r.reports[1:]
				lt.Changed(entryName(k))
				log = append(log, "report "+k)
			}
		case 7, 8: // a call served from the tier
			if it, _, ok := lt.Get(k); ok {
				if msg := check(k, it.Entry.Fence, r.returned, "get"); msg != "" {
					return msg
				}
			}
		case 10: // a call joins a read in flight
			if len(reads) > 0 {
				rd := reads[rng.IntN(len(reads))]
				rd.joiners = append(rd.joiners, joiner{floor: rk[rd.key].returned})
				log = append(log, "join "+rd.key)
			}
		case 11: // a copy reaches its LocalTTL (it is asked for past it)
			lt.mu.Lock()
			if it := lt.byKey[k]; it != nil {
				lt.toMark(it)
			}
			lt.mu.Unlock()
			log = append(log, "expire "+k)
		case 9:
			switch rng.IntN(3) {
			case 0:
				lt.Flush()
				log = append(log, "flush")
			case 1:
				lt.SetLive(false)
				lt.SetLive(true)
				log = append(log, "reconnect")
			case 2:
				lt.mu.Lock()
				if it := lt.head.prev; it != &lt.head {
					lt.evict(it)
				}
				lt.mu.Unlock()
				log = append(log, "evict")
			}
		}
	}
	return ""
}
