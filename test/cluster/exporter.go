package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// EnvExporter names the dra-exporter binary the tests run.
const EnvExporter = "DRA_E2E_EXPORTER"

// ExporterNamespace and ServiceAccount match deploy/manifests.
const (
	ExporterNamespace = "dra-exporter"
	ExporterAccount   = "dra-exporter"
)

// ExporterKubeconfig creates the exporter's ServiceAccount, binds it to the
// ClusterRole read from deploy/manifests/clusterrole.yaml (exactly the one
// users install), and writes a kubeconfig with a token of that account.
func ExporterKubeconfig(ctx context.Context, cp *ControlPlane, clusterRoleFile string) (string, error) {
	return AccountKubeconfig(ctx, cp, clusterRoleFile, ExporterAccount)
}

// AccountKubeconfig is ExporterKubeconfig for another ServiceAccount of the
// exporter's namespace (the node agent has its own, narrower role).
func AccountKubeconfig(ctx context.Context, cp *ControlPlane, clusterRoleFile, account string) (string, error) {
	c := cp.Client
	data, err := os.ReadFile(clusterRoleFile)
	if err != nil {
		return "", err
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		return "", fmt.Errorf("%s: %w", clusterRoleFile, err)
	}
	if err := CreateNamespace(ctx, c, ExporterNamespace); err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ExporterNamespace, Name: account}}
	if _, err := c.CoreV1().ServiceAccounts(ExporterNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	// A binding of the tests' own: tests that apply deploy/manifests
	// (re)write the chart's binding of the same role concurrently.
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + account},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ExporterNamespace, Name: account}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	tok, err := c.CoreV1().ServiceAccounts(ExporterNamespace).CreateToken(ctx, account, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s: %w", account, err)
	}
	path := filepath.Join(cp.Dir, account+".kubeconfig")
	return path, WriteKubeconfig(path, cp.APIServer, cp.CAFile(), tok.Status.Token)
}

// Exporter is a running dra-exporter serve process.
type Exporter struct {
	URL    string
	Log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartExporter runs `dra-exporter serve` and waits for /readyz.
func StartExporter(ctx context.Context, binary, kubeconfig, dir string, extraArgs ...string) (*Exporter, error) {
	return startCommand(ctx, binary, filepath.Join(dir, "dra-exporter.log"),
		append([]string{"serve", "--kubeconfig=" + kubeconfig, "--log.level=debug", "--kube.probe-interval=2s"}, extraArgs...))
}

// StartNodeAgent runs `dra-exporter node` for one node and waits for /readyz.
func StartNodeAgent(ctx context.Context, binary, kubeconfig, dir, node string, extraArgs ...string) (*Exporter, error) {
	return startCommand(ctx, binary, filepath.Join(dir, "node-agent-"+node+".log"),
		append([]string{"node", "--node-name=" + node, "--kubeconfig=" + kubeconfig, "--log.level=debug"}, extraArgs...))
}

func startCommand(ctx context.Context, binary, logPath string, args []string) (*Exporter, error) {
	e, err := launch(binary, logPath, args)
	if err != nil {
		return nil, err
	}
	if err := e.WaitReady(ctx, 60*time.Second); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// LaunchExporter runs `dra-exporter serve`, logging to logPath, without
// waiting for it to be ready (its API server may be down).
func LaunchExporter(binary, kubeconfig, logPath string, extraArgs ...string) (*Exporter, error) {
	return launch(binary, logPath, append([]string{"serve", "--kubeconfig=" + kubeconfig, "--log.level=debug", "--kube.probe-interval=2s"}, extraArgs...))
}

func launch(binary, logPath string, args []string) (*Exporter, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args = append(args, "--web.listen-address="+addr)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	e := &Exporter{URL: "http://" + addr, Log: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(e.exited) }()
	return e, nil
}

// WaitReady waits until /readyz answers 200.
func (e *Exporter) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := e.waitHTTP(ctx, timeout, "/readyz", func(status int) bool { return status == http.StatusOK })
	if err != nil {
		return fmt.Errorf("%w; log:\n%s", err, Tail(e.Log, 30))
	}
	return nil
}

// WaitServing waits until the exporter answers HTTP at all (/healthz):
// its index exists by then, and with it the start time from which it
// recovers transitions (the HTTP server starts after the index).
func (e *Exporter) WaitServing(ctx context.Context, timeout time.Duration) error {
	return e.waitHTTP(ctx, timeout, "/healthz", func(int) bool { return true })
}

// waitHTTP polls path until ok accepts the answer's status, or the
// exporter exits.
func (e *Exporter) waitHTTP(ctx context.Context, timeout time.Duration, path string, ok func(status int) bool) error {
	return WaitFor(ctx, timeout, "dra-exporter "+path, func(ctx context.Context) (bool, error) {
		select {
		case <-e.exited:
			return false, fmt.Errorf("dra-exporter exited: %s", Tail(e.Log, 20))
		default:
		}
		resp, err := http.Get(e.URL + path)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return ok(resp.StatusCode), nil
	})
}

// PID is the exporter's process id.
func (e *Exporter) PID() int { return e.cmd.Process.Pid }

// ScrapeText fetches /metrics as text and how long the answer took.
func (e *Exporter) ScrapeText(timeout time.Duration) (string, time.Duration, error) {
	client := http.Client{Timeout: timeout}
	start := time.Now()
	resp, err := client.Get(e.URL + "/metrics")
	if err != nil {
		return "", time.Since(start), err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err != nil {
		return "", took, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", took, fmt.Errorf("/metrics: %s: %s", resp.Status, body)
	}
	return string(body), took, nil
}

// Stop stops the exporter and waits for it to exit.
func (e *Exporter) Stop() {
	if e.cmd.Process != nil {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
			<-e.exited
		}
	}
}

// Scrape fetches and parses /metrics.
func (e *Exporter) Scrape() (Metrics, error) {
	resp, err := http.Get(e.URL + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s: %s", resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return Metrics(families), nil
}

// Metrics is a parsed scrape.
type Metrics map[string]*dto.MetricFamily

// Sample is one series.
type Sample struct {
	Labels map[string]string
	Value  float64
}

func (s Sample) String() string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, s.Labels[k])
	}
	return "{" + strings.Join(parts, ",") + "} " + fmt.Sprint(s.Value)
}

// Find returns the series of a family whose labels include match. For a
// histogram, name the family and the value is its sample count.
func (m Metrics) Find(name string, match map[string]string) []Sample {
	mf := m[name]
	if mf == nil {
		return nil
	}
	var out []Sample
	for _, metric := range mf.GetMetric() {
		labels := map[string]string{}
		for _, lp := range metric.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		ok := true
		for k, v := range match {
			if labels[k] != v {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		var v float64
		switch {
		case metric.Gauge != nil:
			v = metric.Gauge.GetValue()
		case metric.Counter != nil:
			v = metric.Counter.GetValue()
		case metric.Histogram != nil:
			v = float64(metric.Histogram.GetSampleCount())
		case metric.Untyped != nil:
			v = metric.Untyped.GetValue()
		}
		out = append(out, Sample{Labels: labels, Value: v})
	}
	return out
}

// One says why the family has not exactly one series whose labels include
// labels, with value v; nil when it has.
func (m Metrics) One(name string, labels map[string]string, v float64) error {
	got := m.Find(name, labels)
	if len(got) != 1 {
		return fmt.Errorf("%s%v: want 1 series, got %d %v", name, labels, len(got), got)
	}
	if got[0].Value != v {
		return fmt.Errorf("%s: want %v, got %s", name, v, got[0])
	}
	return nil
}

// None says which series of the family include labels; nil when none does.
func (m Metrics) None(name string, labels map[string]string) error {
	if got := m.Find(name, labels); len(got) > 0 {
		return fmt.Errorf("%s%v: want no series, got %v", name, labels, got)
	}
	return nil
}

// Await scrapes every interval until check passes, and returns that
// scrape, or the last reason it failed once timeout passes.
func (e *Exporter) Await(timeout, interval time.Duration, check func(m Metrics) error) (Metrics, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, err := e.Scrape()
		if err == nil {
			if err = check(m); err == nil {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not within %s: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Sum adds the values of the matching series.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	var sum float64
	for _, s := range m.Find(name, match) {
		sum += s.Value
	}
	return sum
}

// Explain runs `dra-exporter explain` against the cluster.
func Explain(ctx context.Context, binary, kubeconfig, target string) (string, error) {
	cmd := exec.CommandContext(ctx, binary, "explain", "--kubeconfig="+kubeconfig, target)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := ExplainVerdict(cmd.Run()); err != nil {
		return out.String(), fmt.Errorf("explain %s: %w: %s", target, err, errOut.String())
	}
	return out.String(), nil
}

// ExplainVerdict is the error of an explain run, nil when it printed a
// verdict: exit 0 (Ready, or a negative control that holds) and exit 1
// (not Ready, or a control broken or invalid) are verdicts; 2 (usage) and 3
// (unreadable) are errors.
func ExplainVerdict(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil
	}
	return err
}

// CanI asks the API server whether the exporter's account may do verb on
// resource (SubjectAccessReview, as admin).
func CanI(ctx context.Context, c kubernetes.Interface, verb, group, resource string) (bool, error) {
	return canI(ctx, c, "system:serviceaccount:"+ExporterNamespace+":"+ExporterAccount, verb, group, resource)
}

// CanIAs is CanI for another ServiceAccount of the exporter's namespace.
func CanIAs(ctx context.Context, c kubernetes.Interface, account, verb, group, resource string) (bool, error) {
	return canI(ctx, c, "system:serviceaccount:"+ExporterNamespace+":"+account, verb, group, resource)
}
