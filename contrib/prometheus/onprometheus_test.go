package stampedeprom_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// TestDashboardOnPrometheus runs a real prometheus scraping a real
// workload (runWorkload: two Groups on a real redis-server, then Redis
// stopped) and loading the rules file, then requires of what it stored:
//
//   - every event of the workload, counted (a series above zero);
//   - every query of the dashboard, and of its variables, returns data;
//   - every rule evaluates without error, every recording rule records,
//     and each metric or recorded series an alert reads has data;
//   - the alerts the workload provokes are pending or firing: the breaker
//     open, refreshes failing, a corrupt entry, loads outrunning leases,
//     the tier down. (StampedeHitRatioDrop needs a day of history: its
//     unit test in alerts/stampede.rules.test.yml shows it firing.)
//
// Prometheus is polled until all of it holds, up to a deadline.
func TestDashboardOnPrometheus(t *testing.T) {
	bin := needPrometheus(t)
	srv := redistest.Start(t)
	a, b := newNode(t, "a", srv), newNode(t, "b", srv)
	prom := startPrometheus(t, bin, []string{a.target, b.target}, rulesFile)

	// A rate needs a sample from before the events: the series at zero,
	// scraped from both nodes.
	start := time.Now()
	waitFor(t, prom, []promCheck{hasData("scraped", `count(count by (instance) (stampede_requests_total)) == 2`, nil)})
	scraped := time.Now()
	runWorkload(t, srv, a, b)
	ran := time.Now()
	checks := promChecks(t, readDashboard(t))
	waitFor(t, prom, checks)
	t.Logf("first scrapes %v, workload %v, %d checks met %v later",
		scraped.Sub(start).Round(time.Millisecond), ran.Sub(scraped).Round(time.Millisecond),
		len(checks), time.Since(ran).Round(time.Millisecond))
}

// waitFor polls Prometheus until every check holds, failing t with those
// that do not after 30s.
func waitFor(t *testing.T, prom *promServer, checks []promCheck) {
	t.Helper()
	const patience = 30 * time.Second
	deadline := time.Now().Add(patience)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var failing []string
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, c := range checks {
			if err := c.check(ctx, prom); err != nil {
				failing = append(failing, c.name+": "+err.Error())
			}
		}
		cancel()
		if len(failing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d of %d checks fail:\n%s", patience, len(failing), len(checks), strings.Join(failing, "\n"))
		}
		<-tick.C
	}
}

// promCheck is one requirement on what Prometheus stored, nil when met.
type promCheck struct {
	name  string
	check func(ctx context.Context, p *promServer) error
}

// hasData requires expr to return at least one series, each of whose
// values satisfies ok (nil: any value, NaN included).
func hasData(name, expr string, ok func(float64) bool) promCheck {
	return promCheck{name, func(ctx context.Context, p *promServer) error {
		ss, err := p.query(ctx, expr)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", expr, err)
		case len(ss) == 0:
			return fmt.Errorf("%s: no data", expr)
		}
		for _, s := range ss {
			if ok != nil && !ok(s.Value) {
				return fmt.Errorf("%s: %v = %v", expr, s.Metric, s.Value)
			}
		}
		return nil
	}}
}

func positive(v float64) bool { return v > 0 }

func promChecks(t *testing.T, d dashboard) []promCheck {
	var cs []promCheck
	// The workload's events, as Prometheus stored them.
	for _, e := range []string{
		`stampede_requests_total{status="hit"}`,
		`stampede_requests_total{status="hit_local"}`,
		`stampede_requests_total{status="stale"}`,
		`stampede_requests_total{status="miss"}`,
		`stampede_coalesced_total`,
		`stampede_loads_total{result="ok"}`,
		`stampede_loads_total{result="not_found"}`,
		`stampede_loads_total{result="error"}`,
		`stampede_load_duration_seconds_count`,
		`stampede_leases_total{result="won"}`,
		`stampede_leases_total{result="busy"}`,
		`stampede_wakeups_total{source="notification"}`,
		`stampede_wait_duration_seconds_count`,
		`stampede_refresh_errors_total`,
		`stampede_fill_rejections_total`,
		`stampede_corrupt_entries_total`,
		`stampede_oversize_values_total`,
		`stampede_redis_errors_total`,
		`stampede_breaker_transitions_total{state="open"}`,
		`stampede_lock_obtained_total`,
		`stampede_lock_renewals_total{result="ok"}`,
		`stampede_lock_released_total`,
		`stampede_lock_hold_duration_seconds_count`,
	} {
		cs = append(cs, hasData("counted", "sum("+e+")", positive))
	}
	// Both nodes: the breaker open, the tier off though it should be on.
	cs = append(cs,
		hasData("breaker", `count(stampede_breaker_open == 1) == 2`, nil),
		hasData("tier", `count(stampede_local_tier_state{state=~"lost|connecting"} == 1) == 2`, nil),
		hasData("tier", `count(stampede_local_tier_state) == 2 * 7`, nil),
	)
	for _, q := range d.queries(t) {
		cs = append(cs, hasData("dashboard "+q.name, q.expr, nil))
	}
	cs = append(cs, promCheck{"rules", checkRules})
	return cs
}

// alertsProvoked are the alerts the workload makes pending or firing.
var alertsProvoked = []string{
	"StampedeRedisBreakerOpen",
	"StampedeRefreshErrors",
	"StampedeCorruptEntries",
	"StampedeLoadsOutrunLeases",
	"StampedeLocalTierDown",
}

// checkRules requires every rule of the rules file loaded, healthy and
// evaluated; every recording rule's series recorded; every series an
// alert reads present; and the provoked alerts active.
func checkRules(ctx context.Context, p *promServer) error {
	text, err := os.ReadFile(rulesFile)
	if err != nil {
		return err
	}
	want := len(regexp.MustCompile(`(?m)^\s*- (record|alert):`).FindAllIndex(text, -1))
	rules, err := p.rules(ctx)
	if err != nil {
		return err
	}
	if len(rules) != want {
		return fmt.Errorf("%d rules loaded, the file has %d", len(rules), want)
	}
	var errs []error
	for _, r := range rules {
		if r.Health != "ok" || r.LastError != "" {
			errs = append(errs, fmt.Errorf("%s: health %q, last error %q", r.Name, r.Health, r.LastError))
			continue
		}
		switch r.Type {
		case "recording":
			errs = append(errs, hasData(r.Name, r.Name, nil).check(ctx, p))
		case "alerting":
			for _, sel := range selectors(r.Query) {
				errs = append(errs, hasData(r.Name, sel, nil).check(ctx, p))
			}
			if slices.Contains(alertsProvoked, r.Name) && r.State != "pending" && r.State != "firing" {
				errs = append(errs, fmt.Errorf("%s is %s, want pending or firing", r.Name, r.State))
			}
		}
	}
	return errors.Join(errs...)
}

// selector matches a series selector of this adapter's metrics or of a
// recording rule, with its matchers.
var selector = regexp.MustCompile(`\bstampede[_:][A-Za-z0-9_:]*(\{[^}]*\})?`)

// selectors returns the series selectors in expr.
func selectors(expr string) []string {
	return selector.FindAllString(expr, -1)
}
