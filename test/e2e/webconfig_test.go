package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/dra-exporter/dra-exporter/deploy/helm"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// The scrape's credentials in TestChartWebConfig: the web config holds the
// password's bcrypt hash, the ServiceMonitor's Secret the password.
const (
	scrapeUser     = "prometheus"
	scrapePassword = "e2e-scrape-password"
)

// webVariant is one way of setting the chart's web config.
type webVariant struct {
	name       string
	tls, basic bool
}

// TestChartWebConfig renders the chart with TLS, with basic auth and with
// both (web.config, rendered into the chart's Secret), runs the exporter
// binary with the rendered container arguments and the rendered web config
// (the mount paths mapped to a directory of the test), and checks:
//   - the rendered readiness and liveness probes pass as the kubelet would
//     send them (HTTPS on the metrics port with TLS alone; plain HTTP on the
//     probe port, which needs no auth and serves nothing else, with basic
//     auth);
//   - a real HTTP client: scrapes with the CA and the credentials; is
//     refused without them, with a wrong password, and in plain HTTP;
//   - a real Prometheus, configured as prometheus-operator turns the rendered
//     ServiceMonitor's endpoint into a scrape config (scheme, tlsConfig,
//     basicAuth), scrapes every variant (up == 1, the cluster families there).
func TestChartWebConfig(t *testing.T) {
	requireCluster(t)
	helmBin := os.Getenv(helm.EnvHelm)
	if helmBin == "" {
		t.Skipf("%s is not set: `make helm` builds helm and the Makefile exports it", helm.EnvHelm)
	}
	promBin := os.Getenv(cluster.EnvPrometheus)
	if promBin == "" {
		t.Fatalf("%s is not set (make test builds Prometheus and sets it)", cluster.EnvPrometheus)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	caFile := writeServingCert(t, tlsDir)
	hash, err := bcrypt.GenerateFromPassword([]byte(scrapePassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	passwordFile := filepath.Join(dir, "scrape-password")
	if err := os.WriteFile(passwordFile, []byte(scrapePassword), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caFile)
	pool.AppendCertsFromPEM(caPEM)

	var jobs []cluster.ScrapeJob
	for _, v := range []webVariant{{"tls", true, false}, {"basic-auth", false, true}, {"tls-basic-auth", true, true}} {
		var set []string
		if v.tls {
			set = append(set,
				"web.config.tls_server_config.cert_file=/etc/dra-exporter/tls/tls.crt",
				"web.config.tls_server_config.key_file=/etc/dra-exporter/tls/tls.key",
				"web.tlsSecret=dra-exporter-tls",
				"serviceMonitor.tlsConfig.ca.secret.name=dra-exporter-tls",
				"serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
				"serviceMonitor.tlsConfig.serverName=localhost")
		}
		if v.basic {
			set = append(set,
				"web.config.basic_auth_users."+scrapeUser+"="+string(hash),
				"serviceMonitor.basicAuth.secretName=dra-exporter-scrape")
		}
		objs, err := helm.Template(helmBin, repoPath("."), "dra-web", cluster.ExporterNamespace, set...)
		if err != nil {
			t.Fatal(err)
		}
		r := renderedWebOf(t, objs)
		vdir := filepath.Join(dir, v.name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			t.Fatal(err)
		}
		ports := startWebExporter(ctx, t, r, vdir, tlsDir)
		metricsURL := fmt.Sprintf("%s://%s/metrics", map[bool]string{false: "http", true: "https"}[v.tls], ports["metrics"])
		checkWebClient(t, v, metricsURL, ports, pool)

		// The scrape config prometheus-operator makes of the endpoint.
		job := cluster.ScrapeJob{Name: "web-" + v.name, Target: ports["metrics"], HonorLabels: true}
		if s, _ := helm.Get(r.endpoint, "scheme").(string); s != "" {
			job.Scheme = s
		}
		if tc, ok := helm.Get(r.endpoint, "tlsConfig").(map[string]any); ok {
			if helm.Get(tc, "ca", "secret", "name") == "dra-exporter-tls" && helm.Get(tc, "ca", "secret", "key") == "ca.crt" {
				job.CAFile = caFile // the Secret's ca.crt
			}
			job.ServerName, _ = tc["serverName"].(string)
			job.InsecureSkipVerify, _ = tc["insecureSkipVerify"].(bool)
		}
		if ba, ok := helm.Get(r.endpoint, "basicAuth").(map[string]any); ok {
			if helm.Get(ba, "username", "name") != "dra-exporter-scrape" || helm.Get(ba, "password", "name") != "dra-exporter-scrape" {
				t.Fatalf("%s: the ServiceMonitor's basicAuth does not read serviceMonitor.basicAuth.secretName: %v", v.name, ba)
			}
			job.BasicAuthUser, job.BasicAuthPasswordFile = scrapeUser, passwordFile // its username and password keys
		}
		if (job.Scheme == "https") != v.tls || (job.BasicAuthUser != "") != v.basic {
			t.Fatalf("%s: the ServiceMonitor's endpoint does not match the web config: %v", v.name, r.endpoint)
		}
		jobs = append(jobs, job)
	}

	prom, err := cluster.StartPrometheus(ctx, cluster.PrometheusOptions{
		Binary: promBin, Dir: filepath.Join(dir, "prometheus"), Interval: time.Second, ExtraJobs: jobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()
	for _, j := range jobs {
		err := cluster.WaitFor(ctx, 45*time.Second, "Prometheus scrapes "+j.Name, func(ctx context.Context) (bool, error) {
			up, err := prom.Query(ctx, fmt.Sprintf(`up{job=%q} == 1`, j.Name))
			if err != nil || up != 1 {
				return false, nil
			}
			n, err := prom.Query(ctx, fmt.Sprintf(`dra_device_class_devices{job=%q}`, j.Name))
			return err == nil && n > 0, nil
		})
		if err != nil {
			t.Errorf("%v\n%s", err, cluster.Tail(prom.Log, 20))
		}
	}
}

// renderedWeb is what the test reads of a rendering: the exporter's
// container, its web config, and the exporter's ServiceMonitor endpoint.
type renderedWeb struct {
	args      []string
	ports     map[string]int // container port name -> port
	readiness map[string]any // httpGet
	liveness  map[string]any
	webConfig string
	endpoint  map[string]any
}

func renderedWebOf(t *testing.T, objs []helm.Object) renderedWeb {
	t.Helper()
	var r renderedWeb
	for _, o := range objs {
		switch {
		case o.Kind() == "Deployment" && o.Component() == "exporter":
			c := helm.Get(o.Obj, "spec", "template", "spec", "containers").([]any)[0]
			for _, a := range helm.Get(c, "args").([]any) {
				r.args = append(r.args, a.(string))
			}
			r.ports = map[string]int{}
			for _, p := range helm.Get(c, "ports").([]any) {
				r.ports[helm.Get(p, "name").(string)] = int(helm.Get(p, "containerPort").(float64))
			}
			r.readiness, _ = helm.Get(c, "readinessProbe", "httpGet").(map[string]any)
			r.liveness, _ = helm.Get(c, "livenessProbe", "httpGet").(map[string]any)
		case o.Kind() == "Secret" && strings.HasSuffix(o.Name(), "-web-config"):
			r.webConfig, _ = helm.Get(o.Obj, "stringData", "web-config.yml").(string)
		case o.Kind() == "ServiceMonitor" && o.Component() == "exporter":
			r.endpoint = helm.Get(o.Obj, "spec", "endpoints").([]any)[0].(map[string]any)
		}
	}
	if r.args == nil || r.webConfig == "" || r.endpoint == nil {
		t.Fatalf("the rendering lacks the exporter, its web config Secret or its ServiceMonitor")
	}
	return r
}

// startWebExporter runs `dra-exporter serve` with the rendered arguments:
// the listen addresses moved to free loopback ports, the web config file
// and the TLS mount to the test's directories. It waits until the rendered
// readiness probe passes, sent as the kubelet sends it, and returns the
// address of each container port by name.
func startWebExporter(ctx context.Context, t *testing.T, r renderedWeb, dir, tlsDir string) map[string]string {
	t.Helper()
	configFile := filepath.Join(dir, "web-config.yml")
	if err := os.WriteFile(configFile, []byte(strings.ReplaceAll(r.webConfig, "/etc/dra-exporter/tls", tlsDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	byPort := map[string]string{} // ":9877" -> the port's name
	for name, p := range r.ports {
		port, err := cluster.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addrs[name] = fmt.Sprintf("127.0.0.1:%d", port)
		byPort[fmt.Sprintf(":%d", p)] = name
	}
	var args []string
	for _, a := range r.args {
		flag, value, _ := strings.Cut(a, "=")
		switch flag {
		case "--web.listen-address", "--web.probe-address":
			name, ok := byPort[value]
			if !ok {
				t.Fatalf("%s listens on %s, which is no container port %v", flag, value, r.ports)
			}
			a = flag + "=" + addrs[name]
		case "--web.config.file":
			if value != "/etc/dra-exporter/web/web-config.yml" {
				t.Fatalf("--web.config.file=%s is not where the chart mounts the web config", value)
			}
			a = flag + "=" + configFile
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+env.kubeconfig) // the exporter's read-only account
	logPath := filepath.Join(dir, "dra-exporter.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(env.exporter, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); logFile.Close() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })

	err = cluster.WaitFor(ctx, 60*time.Second, "the rendered readiness probe", func(context.Context) (bool, error) {
		if cmd.ProcessState != nil {
			return false, fmt.Errorf("dra-exporter exited: %s", cluster.Tail(logPath, 20))
		}
		return kubeletProbe(r.readiness, addrs) == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, cluster.Tail(logPath, 20))
	}
	if code := kubeletProbe(r.liveness, addrs); code != http.StatusOK {
		t.Errorf("the rendered liveness probe answers %d", code)
	}
	return addrs
}

// kubeletProbe sends an httpGet probe as the kubelet does: its scheme (HTTP
// by default), no credentials, and for HTTPS no certificate verification.
// It returns the status code, 0 when the request failed.
func kubeletProbe(probe map[string]any, addrs map[string]string) int {
	scheme, _ := probe["scheme"].(string)
	if scheme == "" {
		scheme = "HTTP"
	}
	port, _ := probe["port"].(string)
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get(fmt.Sprintf("%s://%s%s", strings.ToLower(scheme), addrs[port], probe["path"]))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// checkWebClient scrapes with a real HTTP client, with and without what the
// web config asks for.
func checkWebClient(t *testing.T, v webVariant, metricsURL string, addrs map[string]string, pool *x509.CertPool) {
	t.Helper()
	get := func(url string, pool *x509.CertPool, user, password string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	user, password := "", ""
	if v.basic {
		user, password = scrapeUser, scrapePassword
	}
	code, body, err := get(metricsURL, pool, user, password)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "dra_device_class_devices{") {
		t.Fatalf("%s: the scrape with what the web config asks for: %d %v", v.name, code, err)
	}
	if v.basic {
		for _, c := range []struct{ user, password string }{{"", ""}, {scrapeUser, "wrong"}, {"someone", scrapePassword}} {
			if code, _, err := get(metricsURL, pool, c.user, c.password); err != nil || code != http.StatusUnauthorized {
				t.Errorf("%s: a scrape as %q/%q answers %d (%v), want 401", v.name, c.user, c.password, code, err)
			}
		}
		// The probe port: the probes without auth, and nothing else.
		for path, want := range map[string]int{"/readyz": http.StatusOK, "/healthz": http.StatusOK, "/metrics": http.StatusNotFound, "/": http.StatusNotFound} {
			if code, _, err := get("http://"+addrs["probe"]+path, nil, "", ""); err != nil || code != want {
				t.Errorf("%s: the probe port's %s answers %d (%v), want %d", v.name, path, code, err, want)
			}
		}
	}
	if v.tls {
		if code, _, err := get(strings.Replace(metricsURL, "https://", "http://", 1), nil, user, password); err == nil && code == http.StatusOK {
			t.Errorf("%s: a plain HTTP scrape of the TLS port succeeds", v.name)
		}
		if _, _, err := get(metricsURL, x509.NewCertPool(), user, password); err == nil {
			t.Errorf("%s: a client that does not trust the CA scrapes", v.name)
		}
	}
}

// writeServingCert writes a CA (ca.crt) and a serving certificate for
// localhost and 127.0.0.1 signed by it (tls.crt, tls.key), as a
// kubernetes.io/tls Secret from cert-manager holds them, and returns the
// CA's path.
func writeServingCert(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dra-exporter e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "dra-exporter"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt":  {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "ca.crt")
}
