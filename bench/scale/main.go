// Command scale is the scale benchmark on a real API server (`make
// bench-scale N=...`; see bench/README.md). It starts etcd and
// kube-apiserver from the e2e harness, loads a synthetic NVIDIA cluster of N
// claims (bench.Generate) through the API, measures a bare informer sync of
// it (the floor), then runs the exporter, and optionally another exporter
// (--compare-cmd, kube-state-metrics in the Makefile), as subprocesses
// against the same API server, one after the other, and writes a Markdown
// table and JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dra-exporter/dra-exporter/bench"
	"github.com/dra-exporter/dra-exporter/test/cluster"
)

type options struct {
	n             int
	workers       int
	scrapes       int
	etcdQuota     int64
	controlPlane  string
	exporter      string
	exporterArgs  string
	compareName   string
	compareCmd    string
	compareReady  string
	compareSelf   string
	compareSynced string
	churnRate     float64
	concurrent    int
	out           string
	dir           string
	keep          bool
}

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

func cli(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.n, "n", 10000, "Claims in the synthetic cluster (pods, one claim each; N/8 nodes and more).")
	fs.IntVar(&o.workers, "workers", 48, "Parallel writers of the loader.")
	fs.IntVar(&o.scrapes, "scrapes", 20, "Plain-text scrapes per exporter (RSS is also read after the 10th).")
	fs.Int64Var(&o.etcdQuota, "etcd-quota-bytes", 0, "etcd --quota-backend-bytes (default: 8 GiB, and 16 GiB above 50k claims).")
	fs.StringVar(&o.controlPlane, "controlplane-bin", os.Getenv(cluster.EnvBinDir), "Directory of etcd and kube-apiserver (make controlplane).")
	fs.StringVar(&o.exporter, "exporter", "bin/dra-exporter", "The dra-exporter binary.")
	fs.StringVar(&o.exporterArgs, "exporter-args", "", "Extra flags for `dra-exporter serve`.")
	fs.StringVar(&o.compareName, "compare-name", "kube-state-metrics", "Name of the --compare-cmd exporter in the table.")
	fs.StringVar(&o.compareCmd, "compare-cmd", "", "Another exporter's command line, run by bash against the same API server after ours; {kubeconfig}, {port} (its /metrics) and {telemetry_port} are replaced.")
	fs.StringVar(&o.compareReady, "compare-readyz", "http://127.0.0.1:{telemetry_port}/readyz", "The compared exporter's readiness URL.")
	fs.StringVar(&o.compareSelf, "compare-self-metrics", "http://127.0.0.1:{telemetry_port}/metrics", "Where the compared exporter serves its go_memstats.")
	fs.StringVar(&o.compareSynced, "compare-synced-family", "kube_pod_info", "A family of the compared exporter that has one series per pod once it has synced (its /readyz may not wait); empty: trust /readyz.")
	fs.Float64Var(&o.churnRate, "churn-rate", 0, "Writes per second (pod readiness flips, claim device status, new Warning events, claim annotations) during a second round of as many scrapes, at least a second apart; 0: no churn round.")
	fs.IntVar(&o.concurrent, "concurrent", 48, "Scrapes at once in the concurrent bursts (protobuf, then text), after 10 protobuf scrapes one after another; 0: neither.")
	fs.StringVar(&o.out, "out", "bin/bench-scale", "Directory for scale-<N>.json and scale-<N>.md.")
	fs.StringVar(&o.dir, "dir", "", "Working directory for the control plane (default: a temporary one, removed unless -keep).")
	fs.BoolVar(&o.keep, "keep", false, "Keep the working directory (logs, etcd data).")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.controlPlane == "" {
		fmt.Fprintf(stderr, "set -controlplane-bin or %s (make controlplane builds it)\n", cluster.EnvBinDir)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, a...)...)
	}
	rep, err := run(ctx, o, logf)
	if err != nil {
		fmt.Fprintln(stderr, "bench-scale:", err)
		return 1
	}
	md := rep.Markdown()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	base := filepath.Join(o.out, fmt.Sprintf("scale-%d", o.n))
	if err := os.WriteFile(base+".json", append(js, '\n'), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := os.WriteFile(base+".md", []byte(md), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprint(stdout, md)
	logf("wrote %s.json and %s.md", base, base)
	return 0
}

// run does the whole benchmark and returns its report.
func run(ctx context.Context, o options, logf func(string, ...any)) (*Report, error) {
	rep := &Report{N: o.n, Started: time.Now().UTC(), Machine: machine()}
	dir := o.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "dra-bench-scale-"); err != nil {
			return nil, err
		}
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	exporter, err := filepath.Abs(o.exporter)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(exporter); err != nil {
		return nil, fmt.Errorf("exporter binary (make build): %w", err)
	}

	t0 := time.Now()
	c := bench.Generate(o.n)
	rep.GenerateSeconds = time.Since(t0).Seconds()
	rep.Cluster = ClusterShape{Claims: len(c.Claims), Pods: len(c.Pods), Nodes: len(c.Nodes), Slices: len(c.Slices),
		Devices: len(c.Slices) * bench.GPUsPerNode, AllocatedDevices: c.AllocatedDevices,
		Events: len(c.Events) + len(c.SchedulerEvents)}
	logf("generated %d claims, %d pods, %d nodes in %.1fs", len(c.Claims), len(c.Pods), len(c.Nodes), rep.GenerateSeconds)

	quota := o.etcdQuota
	if quota <= 0 {
		quota = 8 << 30
		if o.n > 50000 {
			quota = 16 << 30
		}
	}
	t0 = time.Now()
	cp, err := cluster.StartAPI(ctx, o.controlPlane, dir, quota)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	defer cp.Stop()
	rep.ControlPlaneSeconds = time.Since(t0).Seconds()
	logf("etcd and kube-apiserver up in %.1fs (%s)", rep.ControlPlaneSeconds, dir)

	client, err := loaderClient(cp.Admin)
	if err != nil {
		return nil, err
	}
	apiPID, etcdPID := cp.PID("kube-apiserver"), cp.PID("etcd")
	apiBefore, _ := cpuSeconds(apiPID)
	etcdBefore, _ := cpuSeconds(etcdPID)
	stats, err := load(ctx, client, c, o.workers)
	if err != nil {
		return nil, fmt.Errorf("load: %w\n%s", err, cp.Logs(20))
	}
	apiAfter, _ := cpuSeconds(apiPID)
	etcdAfter, _ := cpuSeconds(etcdPID)
	rep.Load = LoadReport{LoadStats: stats, Seconds: stats.Duration.Seconds(),
		APIServerCPUSeconds: apiAfter - apiBefore, EtcdCPUSeconds: etcdAfter - etcdBefore}
	rep.Load.APIServerRSSBytes, _ = rssBytes(apiPID)
	logf("loaded %d objects with %d requests in %.1fs (%.0f requests/s, %d workers)", stats.Objects, stats.Requests,
		rep.Load.Seconds, float64(stats.Requests)/rep.Load.Seconds, stats.Workers)
	// A quiet control plane, so that the API server's post-write work
	// (garbage collection, watch cache, compaction) does not count against
	// the first sync; the same before each exporter (measure).
	waited, err := settle(ctx, apiPID, etcdPID)
	if err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	if rep.Floor, err = measureFloor(ctx, cp.Admin, apiPID); err != nil {
		return nil, err
	}
	rep.Floor.SettleSeconds = waited.Seconds()
	logf("floor: bare informer sync in %.1fs (after %.0fs for a quiet control plane), apiserver %.1f CPU-s, %v", rep.Floor.SyncSeconds, rep.Floor.SettleSeconds, rep.Floor.APIServerSyncCPUSeconds, rep.Floor.Objects)
	if want := len(c.Pods); rep.Floor.Objects["pods"] != want {
		return nil, fmt.Errorf("floor sees %d pods, the loader wrote %d", rep.Floor.Objects["pods"], want)
	}

	m := newMeasurer(apiPID, etcdPID, dir, o.scrapes)
	if o.churnRate > 0 {
		m.churn = newChurner(client, c, o.churnRate)
	}
	m.concurrent = o.concurrent
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	ours := Target{
		Name: "dra-exporter",
		Command: fmt.Sprintf("%s serve --kubeconfig=%s --web.listen-address=127.0.0.1:%d %s",
			shellQuote(exporter), shellQuote(cp.Kubeconfig), port, o.exporterArgs),
		ReadyURL:   fmt.Sprintf("http://127.0.0.1:%d/readyz", port),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
	}
	r, err := m.measure(ctx, ours, logf)
	if err != nil {
		return nil, err
	}
	rep.Results = append(rep.Results, r)

	if o.compareCmd != "" {
		port, err := cluster.FreePort()
		if err != nil {
			return nil, err
		}
		tport, err := cluster.FreePort()
		if err != nil {
			return nil, err
		}
		expand := strings.NewReplacer("{kubeconfig}", shellQuote(cp.Kubeconfig), "{port}", strconv.Itoa(port), "{telemetry_port}", strconv.Itoa(tport)).Replace
		other := Target{
			Name: o.compareName, Command: expand(o.compareCmd),
			ReadyURL: expand(o.compareReady), SelfURL: expand(o.compareSelf),
			MetricsURL:   fmt.Sprintf("http://127.0.0.1:%d/metrics", port),
			SyncedFamily: o.compareSynced, SyncedCount: len(c.Pods),
		}
		r, err := m.measure(ctx, other, logf)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, r)
	}
	rep.Finished = time.Now().UTC()
	rep.MachineAfter = machine()
	return rep, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
