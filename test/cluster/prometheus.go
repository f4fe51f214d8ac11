package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvPrometheus names the prometheus binary (built by `make tools`).
const EnvPrometheus = "DRA_PROMETHEUS"

// Prometheus is a running Prometheus server (its HTTP API; the module build
// has no web UI assets).
type Prometheus struct {
	URL string
	Log string
	cmd *exec.Cmd
}

// PrometheusOptions configure StartPrometheus.
type PrometheusOptions struct {
	Binary   string
	Dir      string
	Target   string        // host:port of the exporter (job dra-exporter); empty: no such job
	Interval time.Duration // scrape and rule evaluation interval
	// RuleFiles are copied into Dir; when ZeroFor is set every `for:`
	// duration is rewritten to 0s, so a test checks the expressions and
	// labels without waiting out the production durations.
	RuleFiles []string
	ZeroFor   bool
	// ExtraJobs are further scrape jobs, one static target each (the
	// demo's recorded dcgm-exporter).
	ExtraJobs []ScrapeJob
}

// ScrapeJob is a scrape job with static targets.
type ScrapeJob struct {
	Name    string
	Target  string   // host:port
	Targets []string // more targets of the job
	// HonorLabels keeps the target's namespace and pod labels (the node
	// agents' series carry the GPU holder's).
	HonorLabels bool
	// Scheme is http (empty) or https; CAFile, ServerName and
	// InsecureSkipVerify are its tls_config.
	Scheme             string
	CAFile             string
	ServerName         string
	InsecureSkipVerify bool
	// BasicAuthUser and BasicAuthPasswordFile are its basic_auth.
	BasicAuthUser         string
	BasicAuthPasswordFile string
	// BearerToken scrapes over HTTPS with this token, without verifying the
	// server's certificate unless CAFile is set (a real kubelet's /metrics).
	BearerToken string
	// ScrapeProtocols are the formats Prometheus asks for, in order
	// (e.g. PrometheusProto, OpenMetricsText1.0.0); empty: its default.
	ScrapeProtocols []string
	// Labels are added to every series of the job's targets.
	Labels map[string]string
}

// config is the job's scrape_configs entry.
func (j ScrapeJob) config() string {
	targets := j.Targets
	if j.Target != "" {
		targets = append([]string{j.Target}, targets...)
	}
	c := fmt.Sprintf("- job_name: %q\n  honor_labels: %t\n", j.Name, j.HonorLabels)
	scheme, insecure := j.Scheme, j.InsecureSkipVerify
	if j.BearerToken != "" {
		if scheme == "" {
			scheme = "https"
		}
		insecure = insecure || j.CAFile == ""
		c += fmt.Sprintf("  authorization:\n    credentials: %q\n", j.BearerToken)
	}
	if scheme != "" {
		c += fmt.Sprintf("  scheme: %s\n", scheme)
	}
	if j.CAFile != "" || j.ServerName != "" || insecure {
		c += "  tls_config:\n"
		if j.CAFile != "" {
			c += fmt.Sprintf("    ca_file: %q\n", j.CAFile)
		}
		if j.ServerName != "" {
			c += fmt.Sprintf("    server_name: %q\n", j.ServerName)
		}
		if insecure {
			c += "    insecure_skip_verify: true\n"
		}
	}
	if j.BasicAuthUser != "" {
		c += fmt.Sprintf("  basic_auth:\n    username: %q\n    password_file: %q\n", j.BasicAuthUser, j.BasicAuthPasswordFile)
	}
	if len(j.ScrapeProtocols) > 0 {
		c += fmt.Sprintf("  scrape_protocols: [%s]\n", strings.Join(j.ScrapeProtocols, ", "))
	}
	c += fmt.Sprintf("  static_configs:\n  - targets: [%s]\n", quotedList(targets))
	if len(j.Labels) > 0 {
		keys := make([]string, 0, len(j.Labels))
		for k := range j.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		c += "    labels:\n"
		for _, k := range keys {
			c += fmt.Sprintf("      %s: %q\n", k, j.Labels[k])
		}
	}
	return c
}

var forLine = regexp.MustCompile(`(?m)^(\s*)for:\s*\S+\s*$`)

// StartPrometheus writes a configuration that scrapes the exporter, loads
// the rule files and waits until the server is ready.
func StartPrometheus(ctx context.Context, o PrometheusOptions) (*Prometheus, error) {
	rulesDir := filepath.Join(o.Dir, "rules")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		return nil, err
	}
	var ruleGlobs []string
	for _, f := range o.RuleFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if o.ZeroFor {
			data = forLine.ReplaceAll(data, []byte("${1}for: 0s"))
		}
		dst := filepath.Join(rulesDir, filepath.Base(f))
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return nil, err
		}
		ruleGlobs = append(ruleGlobs, dst)
	}
	interval := o.Interval.String()
	config := fmt.Sprintf(`global:
  scrape_interval: %s
  evaluation_interval: %s
rule_files:
%s
scrape_configs:
`, interval, interval, yamlList(ruleGlobs))
	if o.Target != "" {
		config += fmt.Sprintf(`- job_name: dra-exporter
  # The exporter's namespace and pod labels name workloads: they must win
  # over the target labels service discovery adds (a ServiceMonitor adds
  # namespace and pod of the exporter itself, as these static labels do).
  honor_labels: true
  static_configs:
  - targets: [%q]
    labels:
      namespace: dra-exporter
      pod: dra-exporter-5f7d8c9b6-x2x7q
`, o.Target)
	}
	for _, j := range o.ExtraJobs {
		config += j.config()
	}
	configPath := filepath.Join(o.Dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(o.Dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Binary,
		"--config.file="+configPath,
		"--storage.tsdb.path="+filepath.Join(o.Dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	go func() { _ = cmd.Wait(); logFile.Close() }()
	p := &Prometheus{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Log: logPath, cmd: cmd}
	err = WaitFor(ctx, 60*time.Second, "prometheus ready", func(ctx context.Context) (bool, error) {
		if cmd.ProcessState != nil {
			return false, fmt.Errorf("prometheus exited: %s", Tail(logPath, 20))
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// quotedList is items as a YAML flow sequence's entries.
func quotedList(items []string) string {
	q := make([]string, len(items))
	for i, it := range items {
		q[i] = fmt.Sprintf("%q", it)
	}
	return strings.Join(q, ", ")
}

func yamlList(items []string) string {
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "- %q\n", it)
	}
	return strings.TrimRight(b.String(), "\n")
}

// Stop stops Prometheus.
func (p *Prometheus) Stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Alert is one entry of /api/v1/alerts.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
}

// Alerts returns the active (pending or firing) alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &body); err != nil {
		return nil, err
	}
	return body.Data.Alerts, nil
}

// ruleGroups is /api/v1/rules: the groups and rules Prometheus loaded.
type ruleGroups []struct {
	Name  string `json:"name"`
	Rules []struct {
		Name      string `json:"name"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
	} `json:"rules"`
}

func (p *Prometheus) rules(ctx context.Context) (ruleGroups, error) {
	var body struct {
		Data struct {
			Groups ruleGroups `json:"groups"`
		} `json:"data"`
	}
	err := p.get(ctx, "/api/v1/rules", &body)
	return body.Data.Groups, err
}

// RuleHealth returns the rules whose last evaluation failed, as
// "group/rule: error".
func (p *Prometheus) RuleHealth(ctx context.Context) ([]string, error) {
	groups, err := p.rules(ctx)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Health == "err" {
				bad = append(bad, g.Name+"/"+r.Name+": "+r.LastError)
			}
		}
	}
	return bad, nil
}

// RuleNames returns the rules Prometheus loaded, as "group/rule" in the
// order of its rules API (the files' order).
func (p *Prometheus) RuleNames(ctx context.Context) ([]string, error) {
	groups, err := p.rules(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, g := range groups {
		for _, r := range g.Rules {
			names = append(names, g.Name+"/"+r.Name)
		}
	}
	return names, nil
}

// Query runs an instant query and returns the number of series.
func (p *Prometheus) Query(ctx context.Context, q string) (int, error) {
	var body struct {
		Data struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/query?query="+url.QueryEscape(q), &body); err != nil {
		return 0, err
	}
	return len(body.Data.Result), nil
}

// Series is one series of a query result: its labels and its values
// (one for an instant query), NaN included.
type Series struct {
	Labels map[string]string
	Values []float64
}

// QueryRange runs a range query.
func (p *Prometheus) QueryRange(ctx context.Context, q string, start, end time.Time, step time.Duration) ([]Series, error) {
	path := fmt.Sprintf("/api/v1/query_range?query=%s&start=%d&end=%d&step=%s",
		url.QueryEscape(q), start.Unix(), end.Unix(), step)
	return p.series(ctx, path)
}

// QueryAt runs an instant query at a time.
func (p *Prometheus) QueryAt(ctx context.Context, q string, at time.Time) ([]Series, error) {
	return p.series(ctx, fmt.Sprintf("/api/v1/query?query=%s&time=%d", url.QueryEscape(q), at.Unix()))
}

func (p *Prometheus) series(ctx context.Context, path string) ([]Series, error) {
	var body struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := p.get(ctx, path, &body); err != nil {
		return nil, err
	}
	var out []Series
	for _, r := range body.Data.Result {
		s := Series{Labels: r.Metric}
		points := r.Values
		if r.Value != nil {
			points = append(points, r.Value)
		}
		for _, pt := range points {
			if len(pt) != 2 {
				continue
			}
			str, _ := pt[1].(string)
			v, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %v: %w", path, pt[1], err)
			}
			s.Values = append(s.Values, v)
		}
		out = append(out, s)
	}
	return out, nil
}

func (p *Prometheus) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, msg)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
