package stampedeprom_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/redistest"
)

// promServer is a real prometheus server (Debian's package, or any in
// $PATH) listening on a free loopback port, with its data in a temporary
// directory, killed when the test ends.
type promServer struct {
	url  string // http://127.0.0.1:port
	logf string // its log, shown when the test fails
}

// needPrometheus skips t when no prometheus binary is installed, or fails
// it when STAMPEDE_REQUIRE_REDIS=1 (CI installs it), and returns its path.
func needPrometheus(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("prometheus")
	switch {
	case err == nil:
		return path
	case redistest.Required():
		t.Fatalf("prometheus not installed and %s is set; install it (Debian: apt-get install prometheus)", redistest.EnvRequire)
	default:
		t.Skipf("prometheus not installed (Debian: apt-get install prometheus); skipping (set %s=1 to fail instead)", redistest.EnvRequire)
	}
	return ""
}

// startPrometheus starts prometheus scraping targets (host:port, path
// /metrics) every 100ms as job "stampede" and evaluating ruleFile every
// 100ms, and returns once it is ready to answer queries.
func startPrometheus(t *testing.T, bin string, targets []string, ruleFile string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	conf := fmt.Sprintf(`global:
  scrape_interval: 100ms
  scrape_timeout: 100ms
  evaluation_interval: 100ms
rule_files: [%q]
scrape_configs:
  - job_name: stampede
    static_configs:
      - targets: [%s]
`, rules, strings.Join(quoted, ", "))
	confFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &promServer{logf: filepath.Join(dir, "prometheus.log")}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(p.logf); err == nil {
				t.Logf("prometheus log:\n%s", lastLines(string(b), 30))
			}
		}
	})
	// A port picked free may be taken before prometheus binds it: then it
	// exits, and a new port is tried.
	for attempt := 1; ; attempt++ {
		err := p.start(t, bin, dir, confFile)
		if err == nil {
			return p
		}
		if attempt == 3 {
			t.Fatalf("prometheus did not start: %v", err)
		}
	}
}

func (p *promServer) start(t *testing.T, bin, dir, confFile string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logf, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin,
		"--config.file="+confFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = dir, logf, logf, sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	p.url = "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("prometheus exited at start (see its log)")
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return errors.New("prometheus not ready after 30s")
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// get calls the HTTP API at path and decodes its data into v.
func (p *promServer) get(ctx context.Context, path string, q url.Values, v any) error {
	u := p.url + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// sample is one series of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// query runs an instant query and returns its vector; a query whose
// result is not a vector is an error.
func (p *promServer) query(ctx context.Context, expr string) ([]sample, error) {
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector", data.ResultType)
	}
	out := make([]sample, len(data.Result))
	for i, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v: %w", r.Value[1], err)
		}
		out[i] = sample{Metric: r.Metric, Value: v}
	}
	return out, nil
}

// rule is a rule as /api/v1/rules shows it.
type rule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Type      string `json:"type"` // "recording" or "alerting"
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	State     string `json:"state"` // alerting: inactive, pending, firing
}

func (p *promServer) rules(ctx context.Context) ([]rule, error) {
	var data struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", nil, &data); err != nil {
		return nil, err
	}
	var out []rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}
