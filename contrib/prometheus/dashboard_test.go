package stampedeprom_test

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	stampedeprom "github.com/stampede-go/stampede/contrib/prometheus"
)

const (
	dashboardFile = "dashboards/stampede.json"
	rulesFile     = "alerts/stampede.rules.yml"
)

// panel is the part of a Grafana panel read here; a row holds its
// collapsed panels.
type panel struct {
	ID      int     `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or {"query": ...}
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// promQuery is a query of the dashboard, named for messages.
type promQuery struct{ name, expr string }

// labelValues is Grafana's label_values(selector, label), which is not
// PromQL.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// queries returns every query of d: each panel target's expr, and each
// query variable as the PromQL it runs (label_values(s, l) as
// count by (l) (s)). Grafana's variables are replaced as a dashboard
// showing every job and group over the last minute would: the
// workload of TestDashboardOnPrometheus fits in a minute.
func (d dashboard) queries(t *testing.T) []promQuery {
	t.Helper()
	r := strings.NewReplacer(`"$job"`, `".+"`, `"$group"`, `".+"`, "$__rate_interval", "1m")
	var out []promQuery
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, promQuery{p.Title + " " + tg.RefID, r.Replace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("variable %s: query %v is not label_values(selector, label)", v.Name, v.Query)
		}
		out = append(out, promQuery{"variable " + v.Name, r.Replace("count by (" + m[2] + ") (" + m[1] + ")")})
	}
	return out
}

// metricName matches the names of this adapter's series (and recording
// rules, stampede:...) in PromQL and prose.
var metricName = regexp.MustCompile(`\bstampede[_:][A-Za-z0-9_:]*`)

// registered returns the metric names New registers, with the names of
// a histogram's series (_bucket, _sum, _count).
func registered(t *testing.T) map[string]bool {
	t.Helper()
	m, reg := newMetrics(t, stampedeprom.Options{})
	m.GuardHooks() // every series appears, at zero, with its hooks
	m.LockHooks()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}

// recorded returns the names of the recording rules of rules.
func recorded(rules string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- record:\s*(\S+)`).FindAllStringSubmatch(rules, -1) {
		out[m[1]] = true
	}
	return out
}

// TestDashboardMetricNames: every metric name the dashboard and the rules
// mention (in queries and in the annotations' prose) is one the adapter
// registers, or a recording rule of the rules file; every panel has a
// unique id and the dashboard's data source variable, and every target a
// query. It needs no server: a renamed metric fails it everywhere.
func TestDashboardMetricNames(t *testing.T) {
	d := readDashboard(t)
	rulesText, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	known := registered(t)
	maps.Copy(known, recorded(string(rulesText)))

	var text []string
	for _, q := range d.queries(t) {
		text = append(text, q.expr)
	}
	text = append(text, string(rulesText))
	mentioned := map[string]bool{}
	for _, s := range text {
		for _, n := range metricName.FindAllString(s, -1) {
			mentioned[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(mentioned)) {
		if !known[n] && !strings.HasSuffix(n, ".rules") { // the file's own name in its comments
			t.Errorf("%s is mentioned but neither registered by the adapter nor recorded by a rule", n)
		}
	}
	for _, n := range []string{"stampede_breaker_open", "stampede_local_tier_state", "stampede_requests_total"} {
		if !mentioned[n] {
			t.Errorf("%s is in neither the dashboard nor the rules", n)
		}
	}

	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, ok := ids[p.ID]; ok {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" {
				if p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %q, want ${datasource}", p.Title, p.Datasource.UID)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" {
					t.Errorf("panel %q: a target without expr or refId", p.Title)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
}
