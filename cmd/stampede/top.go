package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/stampede-go/stampede/guard"
)

var topCommand = command{
	name: "top", args: "",
	summary: "Print the fleet's hottest keys, by calls and by origin loads.\n\n" +
		"Per second: every Group of the\n" +
		"Namespace publishes its own view every 5s (guard.Options.HotKeys, on by default); top merges\n" +
		"them. It only reads; it exits 1 when no Group published in the last 15s.",
	example: "stampede top -redis localhost:6379 -namespace catalog: -n 10",
	setup: func(fs *flag.FlagSet) action {
		var c conn
		c.register(fs, 2*time.Second)
		n := fs.Int("n", 10, "how many keys of each ranking")
		asJSON := fs.Bool("json", false, "print JSON: {nodes, calls: [{key, per_second}], loads: [...]}")
		every := fs.Duration("every", 0, "print again at this interval until interrupted (0: once)")
		return func(ctx context.Context, out io.Writer, args []string) error {
			if len(args) > 0 {
				return usagef("top takes no arguments")
			}
			if *n <= 0 {
				return usagef("-n %d: want at least 1", *n)
			}
			if *every != 0 && *every < 100*time.Millisecond {
				return usagef("-every %v: want 0 (once) or at least 100ms", *every)
			}
			return top(ctx, out, &c, *n, *asJSON, *every)
		}
	},
}

func top(ctx context.Context, out io.Writer, c *conn, n int, asJSON bool, every time.Duration) error {
	g, _, stop, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer stop()
	lost := false
	for {
		hk, err := g.FleetHotKeys(ctx)
		switch {
		case err != nil && every == 0:
			return err
		case err != nil:
			// As watch does: a Redis that stalls or restarts is a line,
			// not the end of the view the operator keeps open.
			if ctx.Err() != nil {
				return nil
			}
			if !lost {
				writeTopState(out, asJSON, "lost", err.Error()+"; trying again every "+every.String())
				lost = true
			}
		default:
			if lost {
				writeTopState(out, asJSON, "back", "")
				lost = false
			}
			if hk.Nodes == 0 && every == 0 {
				return errors.New("no Group of this Namespace published hot keys in the last 15s (none called, HotKeys off, or another Namespace)")
			}
			hk.Calls, hk.Loads = hk.Calls[:min(n, len(hk.Calls))], hk.Loads[:min(n, len(hk.Loads))]
			if asJSON {
				err = writeTopJSON(out, hk)
			} else {
				err = writeTop(out, hk)
			}
			if err != nil || every == 0 {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// writeTopState prints a line of top -every's own: "lost" (why) when
// Redis stopped answering, "back" when it answers again; with asJSON, an
// object {"lost": why} or {"back": true}.
func writeTopState(w io.Writer, asJSON bool, state, why string) {
	if !asJSON {
		line := time.Now().Format("15:04:05") + "  " + state
		if why != "" {
			line += ": " + printable(why)
		}
		fmt.Fprintln(w, line)
		return
	}
	var v any = map[string]bool{state: true}
	if why != "" {
		v = map[string]string{state: why}
	}
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(escapeJSON(b), '\n'))
}

func writeTop(w io.Writer, hk guard.HotKeys) error {
	fmt.Fprintf(w, "%s  %d node(s) published in the last 15s", time.Now().Format("15:04:05"), hk.Nodes)
	if hk.Foreign > 0 {
		fmt.Fprintf(w, "; %d view(s) skipped, not a Group's (another type, no TTL, too large, malformed)", hk.Foreign)
	}
	fmt.Fprintln(w)
	for _, r := range []struct {
		what string
		keys []guard.HotKey
	}{{"calls/s", hk.Calls}, {"loads/s", hk.Loads}} {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\t%s\t\n", r.what)
		for i, k := range r.keys {
			fmt.Fprintf(tw, "%d\t%.1f\t  %s\n", i+1, k.PerSecond, shownUpTo(k.Key, maxShownKey))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

type jsonTop struct {
	Nodes   int          `json:"nodes"`
	Foreign int          `json:"foreign,omitempty"` // views skipped: not a Group's
	Calls   []jsonHotKey `json:"calls"`
	Loads   []jsonHotKey `json:"loads"`
}

type jsonHotKey struct {
	Key       string  `json:"key"`
	KeyBytes  []byte  `json:"key_base64,omitempty"` // the key's bytes, when they are not UTF-8
	PerSecond float64 `json:"per_second"`
}

func writeTopJSON(w io.Writer, hk guard.HotKeys) error {
	conv := func(ks []guard.HotKey) []jsonHotKey {
		out := make([]jsonHotKey, len(ks))
		for i, k := range ks {
			out[i] = jsonHotKey{Key: k.Key, KeyBytes: notUTF8(k.Key), PerSecond: k.PerSecond}
		}
		return out
	}
	b, err := json.Marshal(jsonTop{Nodes: hk.Nodes, Foreign: hk.Foreign, Calls: conv(hk.Calls), Loads: conv(hk.Loads)})
	if err != nil {
		return err
	}
	_, err = w.Write(append(escapeJSON(b), '\n'))
	return err
}
