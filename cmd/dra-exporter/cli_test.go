package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

func runArgs(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	rc := run(args, &out, &errOut)
	return rc, out.String(), errOut.String()
}

// Every command prints its help on stdout and exits 0, however it is
// asked for; the listing names every command.
func TestHelpExitsZero(t *testing.T) {
	for _, c := range commands() {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			rc, out, errOut := runArgs(args...)
			if rc != 0 || !strings.HasPrefix(out, "usage: dra-exporter "+c.name) || errOut != "" {
				t.Errorf("%v: exit %d, want 0 with the usage on stdout:\n%s\nstderr: %s", args, rc, out, errOut)
			}
			if c.name != "version" && c.name != "docs" && !strings.Contains(out, "\nFlags:\n") {
				t.Errorf("%v: no flags listed:\n%s", args, out)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "help"}} {
		rc, out, errOut := runArgs(args...)
		if rc != 0 || !strings.HasPrefix(out, "usage: dra-exporter <command>") || errOut != "" {
			t.Errorf("%v: exit %d, want 0 with the listing on stdout:\n%s\nstderr: %s", args, rc, out, errOut)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "\n"+c.name) {
				t.Errorf("%v: the listing lacks %s:\n%s", args, c.name, out)
			}
		}
		if !strings.Contains(out, "\nserve*\n") {
			t.Errorf("%v: the listing does not mark serve the default:\n%s", args, out)
		}
	}
	// As kubectl dra-exporter, the listing holds only the plugin's commands.
	var out bytes.Buffer
	if rc := runPlugin([]string{"--help"}, &out, &out); rc != 0 || strings.Contains(out.String(), "\nserve") || !strings.Contains(out.String(), "\nbundle\n") {
		t.Errorf("kubectl dra-exporter --help: exit %d:\n%s", rc, out.String())
	}
}

// A usage error exits 2 with kingpin's message on stderr and nothing on
// stdout.
func TestUsageErrorsExitTwo(t *testing.T) {
	for _, c := range commands() {
		rc, out, errOut := runArgs(c.name, "--no-such-flag")
		want := "dra-exporter " + c.name + ": error: unknown long flag '--no-such-flag', try --help\n"
		if rc != 2 || out != "" || errOut != want {
			t.Errorf("%s --no-such-flag: exit %d, stderr %q, stdout %q; want 2, %q", c.name, rc, errOut, out, want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "dra-exporter serve: error: unknown long flag '--no-such-flag'"},
		{[]string{"no-such-command"}, `dra-exporter: error: unknown command "no-such-command"`},
		{[]string{"help", "no-such-command"}, `dra-exporter: error: unknown command "no-such-command"`},
		{[]string{"serve", "extra"}, "unexpected extra"},
		{[]string{"serve", "--auto-sharding=maybe"}, `--auto-sharding: "maybe" is not a boolean`},
		{[]string{"serve", "--kube.probe-interval=soon"}, "invalid duration"},
		{[]string{"node", "--gpu.source=cuda"}, "enum value must be one of auto,dcgm,nvml,recorded,none, got 'cuda'"},
		{[]string{"snapshot"}, "required flag(s) '--from' not provided"},
		{[]string{"explain"}, "required argument 'namespace/pod' not provided"},
		{[]string{"explain", "no-slash"}, `want NAMESPACE/POD (or POD with -n NAMESPACE), got "no-slash"`},
		{[]string{"bundle"}, "required flag(s) '--output' not provided"},
		{[]string{"bundle", "-o", "x.tar.gz", "--agent.access=ssh"}, "enum value must be one of auto,proxy,direct"},
		{[]string{"version", "extra"}, "unexpected extra"},
	} {
		rc, _, errOut := runArgs(tc.args...)
		if rc != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 with %q", tc.args, rc, errOut, tc.want)
		}
	}
}

// Flags may come before or after the positional arguments.
func TestFlagsAroundArguments(t *testing.T) {
	objects := "../../testdata/gates/objects.yaml"
	rc1, before, _ := runArgs("explain", "--from", objects, "--now", goldenNow, "llm-canary/llm-canary-ok")
	rc2, after, _ := runArgs("explain", "llm-canary/llm-canary-ok", "--from", objects, "--now="+goldenNow)
	if rc1 != 0 || rc2 != 0 || before != after || !strings.Contains(before, "Verdict:") {
		t.Errorf("explain: flags first exit %d, last exit %d; outputs differ or lack a verdict:\n%s\n---\n%s", rc1, rc2, before, after)
	}
	missing := filepath.Join(t.TempDir(), "missing.tar.gz")
	for _, args := range [][]string{{"gates", "ns", "--from", missing}, {"gates", "--from", missing, "ns"}, {"gates", "-o", "json", "--from=" + missing, "ns"}} {
		if rc, _, errOut := runArgs(args...); rc != gatesError || !strings.Contains(errOut, "missing.tar.gz") {
			t.Errorf("%v: exit %d (%s), want %d reading the bundle", args, rc, errOut, gatesError)
		}
	}
}

// The forms deployments and tests pass keep their meaning: --flag=value,
// --flag value, an empty value, repeated flags, and booleans with =true or
// =false as the standard library took them.
func TestFlagForms(t *testing.T) {
	parseWith := func(t *testing.T, args ...string) (*webFlags, *nodeFlags, *shardFlags) {
		t.Helper()
		app := kingpin.New("test", "")
		var w webFlags
		w.register(app, ":9878")
		var nf nodeFlags
		nf.register(app)
		var sf shardFlags
		sf.register(app)
		var extra []string
		app.Arg("extra", "").StringsVar(&extra)
		if rc, ok := parse(app, args); !ok {
			t.Fatalf("%v: exit %d", args, rc)
		}
		if len(extra) > 0 {
			t.Errorf("%v: read as positional arguments: %v", args, extra)
		}
		return &w, &nf, &sf
	}
	w, nf, sf := parseWith(t)
	if got := *w.toolkit.WebListenAddresses; !slices.Equal(got, []string{":9878"}) || nf.procRoot != "/proc" || w.metricsPath != "/metrics" || nf.claimRefresh != 30*time.Second || sf.total != 1 {
		t.Errorf("defaults: listen %v, proc-root %q, telemetry path %q, claim refresh %v, total shards %d", got, nf.procRoot, w.metricsPath, nf.claimRefresh, sf.total)
	}
	w, nf, sf = parseWith(t, "--web.listen-address=127.0.0.1:1", "--web.listen-address", "127.0.0.1:2", "--proc-root=", "--claim.refresh-interval=2s", "--total-shards", "3", "--log.level=debug")
	if got := *w.toolkit.WebListenAddresses; !slices.Equal(got, []string{"127.0.0.1:1", "127.0.0.1:2"}) || nf.procRoot != "" || nf.claimRefresh != 2*time.Second || sf.total != 3 || w.log.Level.String() != "debug" {
		t.Errorf("set: listen %v, proc-root %q, claim refresh %v, total shards %d, level %s", got, nf.procRoot, nf.claimRefresh, sf.total, w.log.Level)
	}
	for args, want := range map[string]bool{"--auto-sharding": true, "--auto-sharding=true": true, "--auto-sharding=1": true, "--auto-sharding=false": false, "--no-auto-sharding": false} {
		_, _, sf := parseWith(t, args, "--web.systemd-socket=false")
		if sf.auto != want {
			t.Errorf("%s: auto-sharding %v, want %v", args, sf.auto, want)
		}
	}
	// After "--" nothing is a flag.
	app := kingpin.New("test", "")
	var b bool
	app.Flag("b", "").BoolVar(&b)
	var rest []string
	app.Arg("rest", "").StringsVar(&rest)
	if _, ok := parse(app, []string{"--", "--b=false"}); !ok || b || !slices.Equal(rest, []string{"--b=false"}) {
		t.Errorf(`after "--": b %v, arguments %v`, b, rest)
	}
}

// $NODE_NAME is --node-name's default, and the flag wins over it.
func TestNodeNameFromEnvironment(t *testing.T) {
	t.Setenv("NODE_NAME", "gpu-node-7")
	for args, want := range map[string]string{"": "gpu-node-7", "--node-name=gpu-node-1": "gpu-node-1"} {
		app := kingpin.New("test", "")
		var nf nodeFlags
		nf.register(app)
		if _, ok := parse(app, strings.Fields(args)); !ok || nf.nodeName != want {
			t.Errorf("%q: node name %q, want %q", args, nf.nodeName, want)
		}
	}
}
