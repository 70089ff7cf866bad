package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// statusOrder lists the outcomes in the order the breakdown shows them.
var statusOrder = []string{"hit", "stale", "miss", "shared", "degraded"}

// writeTable writes one row per strategy, then how each strategy's answers
// came about and the first error of any strategy that had errors.
func writeTable(w io.Writer, results []result) {
	const row = "%-13s %10s %13s %8s %9s %9s %7s\n"
	fmt.Fprintf(w, row, "strategy", "requests", "origin loads", "stale", "p50", "p99", "errors")
	for _, r := range results {
		fmt.Fprintf(w, row, r.name,
			fmt.Sprint(r.requests), fmt.Sprint(r.loads), fmt.Sprint(r.stale),
			fmtDur(r.p50), fmtDur(r.p99), fmt.Sprint(r.errors))
	}
	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%-13s answers: %s\n", r.name, breakdown(r.statuses))
	}
	for _, r := range results {
		if r.hooks != nil {
			fmt.Fprintf(w, "\n%s hooks (all nodes): %v\n", r.name, r.hooks)
		}
	}
	for _, r := range results {
		if r.firstErr != nil {
			fmt.Fprintf(w, "%-13s first error: %v\n", r.name, r.firstErr)
		}
	}
}

func breakdown(st map[string]int64) string {
	keys := slices.Sorted(maps.Keys(st))
	slices.SortStableFunc(keys, func(a, b string) int {
		return order(a) - order(b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, st[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func order(status string) int {
	if i := slices.Index(statusOrder, status); i >= 0 {
		return i
	}
	return len(statusOrder)
}

// fmtDur shows a latency in milliseconds with two decimals.
func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
