package main

// The report: JSON for machines, a Markdown table for the README.

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Report is one benchmark run.
type Report struct {
	N                   int          `json:"n"`
	Started             time.Time    `json:"started"`
	Finished            time.Time    `json:"finished"`
	Machine             Machine      `json:"machine"`
	MachineAfter        Machine      `json:"machine_after"`
	Cluster             ClusterShape `json:"cluster"`
	GenerateSeconds     float64      `json:"generate_seconds"`
	ControlPlaneSeconds float64      `json:"controlplane_seconds"`
	Load                LoadReport   `json:"load"`
	Floor               *Floor       `json:"floor"`
	Results             []*Result    `json:"results"`
}

// ClusterShape is what the loader wrote.
type ClusterShape struct {
	Claims           int `json:"claims"`
	Pods             int `json:"pods"`
	Nodes            int `json:"nodes"`
	Slices           int `json:"slices"`
	Devices          int `json:"devices"`
	AllocatedDevices int `json:"allocated_devices"`
	Events           int `json:"events"`
}

// LoadReport is the loader's cost.
type LoadReport struct {
	LoadStats
	Seconds             float64 `json:"seconds"`
	APIServerCPUSeconds float64 `json:"apiserver_cpu_seconds"`
	EtcdCPUSeconds      float64 `json:"etcd_cpu_seconds"`
	APIServerRSSBytes   int64   `json:"apiserver_rss_bytes"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs    int    `json:"cpus"`
	Model   string `json:"cpu_model"`
	MemKiB  string `json:"mem_total"`
	LoadAvg string `json:"loadavg"`
	Go      string `json:"go"`
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.Model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		m.MemKiB = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(data))
		m.LoadAvg = strings.Join(f[:min(3, len(f))], " ")
	}
	return m
}

// Markdown renders the run as a table: one column per exporter, and the
// ratio of ours to the compared one.
func (r *Report) Markdown() string {
	var b strings.Builder
	c := r.Cluster
	fmt.Fprintf(&b, "### %s claims (%d pods, %d nodes, %d GPUs, %d allocated; %d events)\n\n",
		short(r.N), c.Pods, c.Nodes, c.Devices, c.AllocatedDevices, c.Events)
	fmt.Fprintf(&b, "Loaded %d objects with %d requests in %.1f s (%.0f requests/s, %d workers; kube-apiserver %.0f CPU-s, etcd %.0f CPU-s). ",
		r.Load.Objects, r.Load.Requests, r.Load.Seconds, float64(r.Load.Requests)/r.Load.Seconds, r.Load.Workers,
		r.Load.APIServerCPUSeconds, r.Load.EtcdCPUSeconds)
	fmt.Fprintf(&b, "Floor (bare protobuf informer sync of the same objects, in-process): %.1f s, kube-apiserver %.1f CPU-s. ",
		r.Floor.SyncSeconds, r.Floor.APIServerSyncCPUSeconds)
	// Each sync starts on a quiet control plane (settle).
	b.WriteString("Each sync started once etcd and kube-apiserver used under a tenth of a core (waited")
	fmt.Fprintf(&b, " %.0f s before the floor", r.Floor.SettleSeconds)
	for _, x := range r.Results {
		fmt.Fprintf(&b, ", %.0f s before %s", x.SettleSeconds, x.Name)
	}
	b.WriteString("). ")
	fmt.Fprintf(&b, "Run %s, %s wall; %d CPUs (%s), load average %s before, %s after.\n\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Finished.Sub(r.Started).Round(time.Second), r.Machine.CPUs, r.Machine.Model,
		r.Machine.LoadAvg, r.MachineAfter.LoadAvg)

	b.WriteString("| |")
	for _, x := range r.Results {
		fmt.Fprintf(&b, " %s |", x.Name)
	}
	compare := len(r.Results) == 2
	if compare {
		fmt.Fprintf(&b, " %s / %s |", r.Results[0].Name, r.Results[1].Name)
	}
	b.WriteString("\n|---|")
	for range r.Results {
		b.WriteString("---:|")
	}
	if compare {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	row := func(name string, val func(*Result) float64, format func(float64) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, x := range r.Results {
			fmt.Fprintf(&b, " %s |", format(val(x)))
		}
		if compare {
			if d := val(r.Results[1]); d != 0 {
				fmt.Fprintf(&b, " %.2fx |", val(r.Results[0])/d)
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
	secs := func(v float64) string {
		if v < 1 {
			return fmt.Sprintf("%.0f ms", v*1000)
		}
		return fmt.Sprintf("%.2f s", v)
	}
	cpus := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	mem := func(v float64) string {
		if v >= 1<<30 {
			return fmt.Sprintf("%.2f GiB", v/(1<<30))
		}
		return fmt.Sprintf("%.0f MiB", v/(1<<20))
	}
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	mb := func(v float64) string { return fmt.Sprintf("%.1f MB", v/1e6) }
	row("time to ready (synced)", func(x *Result) float64 { return x.ReadySeconds }, secs)
	fmt.Fprintf(&b, "| ready / floor |")
	for _, x := range r.Results {
		fmt.Fprintf(&b, " %.2fx |", x.ReadySeconds/r.Floor.SyncSeconds)
	}
	if compare {
		b.WriteString(" |")
	}
	b.WriteString("\n")
	row("kube-apiserver CPU-s during sync", func(x *Result) float64 { return x.APIServerSyncCPUSeconds }, cpus)
	row("exporter CPU-s to sync", func(x *Result) float64 { return x.SyncCPUSeconds }, cpus)
	row("RSS after sync", func(x *Result) float64 { return float64(x.RSSAfterSyncBytes) }, mem)
	row("RSS after 10 scrapes", func(x *Result) float64 { return float64(x.RSSAfter10ScrapesBytes) }, mem)
	row("Go heap in use after scrapes", func(x *Result) float64 { return float64(x.GoHeapInuseBytes) }, mem)
	row(fmt.Sprintf("scrape p50 (%d, text)", len(r.Results[0].Scrapes)), func(x *Result) float64 { return x.ScrapeP50Seconds }, secs)
	row("scrape p99 (slowest)", func(x *Result) float64 { return x.ScrapeP99Seconds }, secs)
	row("scrape, gzip", func(x *Result) float64 { return x.GzipScrapeSeconds }, secs)
	row("CPU-s per scrape", func(x *Result) float64 { return x.ScrapeCPUSeconds }, cpus)
	row("series", func(x *Result) float64 { return float64(x.Series) }, count)
	row("text bytes", func(x *Result) float64 { return float64(x.Bytes) }, mb)
	row("gzip bytes", func(x *Result) float64 { return float64(x.GzipBytes) }, mb)
	row("CPU µs per series", func(x *Result) float64 { return x.CPUMicrosPerSeries }, func(v float64) string { return fmt.Sprintf("%.1f", v) })
	if f := r.Results[0].Formats; f != nil {
		formats := func(val func(*Formats) float64) func(*Result) float64 {
			return func(x *Result) float64 {
				if x.Formats == nil {
					return 0
				}
				return val(x.Formats)
			}
		}
		row(fmt.Sprintf("scrape p50 (%d, asking for protobuf)", len(f.ProtoScrapes)), formats(func(f *Formats) float64 { return f.ProtoP50Seconds }), secs)
		row("protobuf p50 / text p50", func(x *Result) float64 {
			if x.Formats == nil || x.ScrapeP50Seconds == 0 {
				return 0
			}
			return x.Formats.ProtoP50Seconds / x.ScrapeP50Seconds
		}, func(v float64) string { return fmt.Sprintf("%.2fx", v) })
		fmt.Fprintf(&b, "| answered protobuf with |")
		for _, x := range r.Results {
			if x.Formats != nil {
				fmt.Fprintf(&b, " %s |", strings.SplitN(x.Formats.ProtoContentType, ";", 2)[0])
			} else {
				b.WriteString(" |")
			}
		}
		if compare {
			b.WriteString(" |")
		}
		b.WriteString("\n")
		for _, burst := range []struct {
			name string
			of   func(*Formats) *Burst
		}{{"protobuf", func(f *Formats) *Burst { return &f.ProtoBurst }}, {"text", func(f *Formats) *Burst { return &f.TextBurst }}} {
			name := fmt.Sprintf("%d %s scrapes at once (gzip)", f.Concurrent, burst.name)
			row(name+": RSS before", formats(func(f *Formats) float64 { return float64(burst.of(f).IdleRSSBytes) }), mem)
			row(name+": peak RSS", formats(func(f *Formats) float64 { return float64(burst.of(f).PeakRSSBytes) }), mem)
			row(name+": peak / before", formats(func(f *Formats) float64 { return burst.of(f).PeakOverIdle }), func(v float64) string { return fmt.Sprintf("%.2fx", v) })
			row(name+": p50", formats(func(f *Formats) float64 { return burst.of(f).P50Seconds }), secs)
			row(name+": slowest", formats(func(f *Formats) float64 { return burst.of(f).MaxSeconds }), secs)
			row(name+": failed", formats(func(f *Formats) float64 { return float64(burst.of(f).Failed) }), count)
		}
	}
	if ch := r.Results[0].Churn; ch != nil {
		fmt.Fprintf(&b, "| **under churn** (%.0f writes/s: readiness flips, device status, events, annotations) |%s\n", ch.Rate,
			strings.Repeat(" |", len(r.Results)+len(r.Results)/2))
		row(fmt.Sprintf("scrape p50 (%d, text)", len(r.Results[0].ChurnScrapes)), func(x *Result) float64 { return x.ChurnScrapeP50Seconds }, secs)
		row("scrape p99 (slowest)", func(x *Result) float64 { return x.ChurnScrapeP99Seconds }, secs)
		row("CPU-s per scrape", func(x *Result) float64 { return x.ChurnScrapeCPUSeconds }, cpus)
		row("RSS after the churn scrapes", func(x *Result) float64 { return float64(x.RSSAfterChurnBytes) }, mem)
		row("scrapes with a claim not in exactly one state", func(x *Result) float64 { return float64(x.ChurnInconsistent) }, count)
	}
	b.WriteString("\n")
	return b.String()
}

func short(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
