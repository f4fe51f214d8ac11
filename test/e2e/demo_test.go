package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dra-exporter/dra-exporter/test/cluster"
	"github.com/dra-exporter/dra-exporter/test/node"
)

// demoExample is a command `make demo` prints and the comment printed
// under it: what it shows, "(exit N)", and ", from HH:MM:SS" when it holds
// only once Prometheus has watched the window.
type demoExample struct {
	section, command, comment string
	exit                      int
	from                      time.Time
}

var (
	demoExit = regexp.MustCompile(`\(exit (\d+)\)`)
	demoFrom = regexp.MustCompile(`, from (\d\d:\d\d:\d\d)$`)
	demoGate = regexp.MustCompile(`^FAIL: gate (\w+), (\w+)`)
)

// TestDemoPrintedCommands runs make demo's program as `make demo` runs it
// (built from ./test/demo, started in the repository's root with the
// Makefile's environment: a real node where the machine allows one), reads
// what it prints, and runs every command it prints as a user pasting it
// would (bash -c, from the root). Each is held to the comment under it: its
// exit status, and its first word in the output (PASS and FAIL as the gates
// verdict, READY, BLOCKED and HOLDS as explain's). Among them there must be
// a gates example that passes (exit 0) and one that fails (exit 1), on the
// simulated nodes and, where it runs, on the real node. Interrupted, the
// demo stops cleanly (exit 0; the real node leaves nothing behind).
func TestDemoPrintedCommands(t *testing.T) {
	requireCluster(t)
	if os.Getenv(cluster.EnvPrometheus) == "" {
		t.Fatalf("%s is not set (make test builds Prometheus and sets it)", cluster.EnvPrometheus)
	}
	start := time.Now()
	root, err := filepath.Abs(repoPath(""))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "demo")
	build := exec.Command("go", "build", "-o", bin, "./test/demo")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/demo: %v\n%s", err, out)
	}
	built := time.Since(start)

	logPath := filepath.Join(t.TempDir(), "demo.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	demo := exec.Command(bin)
	demo.Dir, demo.Stderr = root, logFile
	stdout, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- demo.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = demo.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(90 * time.Second):
			_ = demo.Process.Kill()
			<-exited
			return errors.New("the demo did not stop within 90s of SIGTERM: killed")
		}
	}
	t.Cleanup(func() { _ = stop() })

	printed, err := readDemo(stdout, 5*time.Minute)
	if err != nil {
		t.Fatalf("%v\nprinted:\n%s\nlog:\n%s", err, printed, cluster.Tail(logPath, 40))
	}
	ready := time.Since(start)
	t.Logf("make demo printed (after %s, %s of it building):\n%s", ready.Round(time.Second), built.Round(time.Second), printed)
	examples, err := parseDemo(printed, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	realNode := node.CanRun()
	if realNode == nil {
		_, realNode = node.BinariesFromEnv()
	}
	sections := map[string]bool{}
	for _, e := range examples {
		sections[e.section] = true
	}
	if want := realNode == nil; sections["real node"] != want {
		t.Errorf("the demo printed the real node's examples: %v; the machine runs a real node: %v (%v)", sections["real node"], want, realNode)
	}
	if realNode != nil && !strings.Contains(printed, "No real node (") {
		t.Errorf("the machine runs no real node (%v), and the demo does not say so", realNode)
	}
	for section := range sections {
		pass, fail := false, false
		for _, e := range examples {
			if e.section == section && strings.Contains(e.command, " gates ") {
				pass = pass || (e.exit == 0 && strings.HasPrefix(e.comment, "PASS"))
				fail = fail || (e.exit == 1 && strings.HasPrefix(e.comment, "FAIL"))
			}
		}
		if !pass || !fail {
			t.Errorf("%s: a gates example that passes: %v, one that fails: %v; want both", section, pass, fail)
		}
	}

	for _, e := range examples {
		out, tries, err := runExample(root, e)
		if err != nil {
			t.Errorf("%s: %s\n  # %s\n%v\n%s", e.section, e.command, e.comment, err, out)
			continue
		}
		t.Logf("%s: exit %d as printed (%d tries): %s", e.section, e.exit, tries, e.command)
	}
	if err := stop(); err != nil {
		t.Errorf("the demo, interrupted: %v\n%s", err, cluster.Tail(logPath, 40))
	}
	t.Logf("wall time %s (build %s, demo up %s)", time.Since(start).Round(time.Second), built.Round(time.Second), (ready - built).Round(time.Second))
}

// readDemo reads what the demo prints up to the line that ends it.
func readDemo(stdout interface{ Read([]byte) (int, error) }, timeout time.Duration) (string, error) {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var b strings.Builder
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return b.String(), errors.New("the demo ended before it printed its examples")
			}
			b.WriteString(line + "\n")
			if line == "Ctrl-C stops the demo." {
				go func() { // the demo prints nothing more; keep its pipe open
					for range lines {
					}
				}()
				return b.String(), nil
			}
		case <-deadline:
			return b.String(), fmt.Errorf("the demo printed no end of its examples within %s", timeout)
		}
	}
}

// parseDemo reads the examples: a line "  COMMAND" followed by its comment
// "      # COMMENT", in the section "Try" (the simulated nodes) or the real
// node's. now is when the demo printed them (a from time before it is
// tomorrow's).
func parseDemo(printed string, now time.Time) ([]demoExample, error) {
	var out []demoExample
	section := ""
	lines := strings.Split(printed, "\n")
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "Try"):
			section = "simulated nodes"
			continue
		case strings.HasPrefix(line, "The real node "):
			section = "real node"
			continue
		}
		comment, ok := strings.CutPrefix(line, "      # ")
		if !ok || section == "" {
			continue
		}
		command := strings.TrimPrefix(lines[i-1], "  ")
		if command == lines[i-1] || strings.HasPrefix(command, " ") {
			return nil, fmt.Errorf("comment %q follows no command: %q", comment, lines[i-1])
		}
		e := demoExample{section: section, command: command, comment: comment}
		m := demoExit.FindStringSubmatch(comment)
		if m == nil {
			return nil, fmt.Errorf("%q: the comment %q has no (exit N)", command, comment)
		}
		e.exit, _ = strconv.Atoi(m[1])
		if m := demoFrom.FindStringSubmatch(comment); m != nil {
			clock, err := time.ParseInLocation("15:04:05", m[1], time.Local)
			if err != nil {
				return nil, err
			}
			y, mo, d := now.Date()
			e.from = time.Date(y, mo, d, clock.Hour(), clock.Minute(), clock.Second(), 0, time.Local)
			if now.Sub(e.from) > 12*time.Hour {
				e.from = e.from.AddDate(0, 0, 1)
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, errors.New("the demo printed no example")
	}
	return out, nil
}

// runExample runs the example's line with bash from the repository's root
// until its exit status and output are the comment's, and returns the last
// output and the tries.
func runExample(root string, e demoExample) (string, int, error) {
	// A line without a from time works at once; one with it holds from
	// then on, within a minute (a scrape and a rule evaluation late on a
	// loaded machine).
	deadline := time.Now()
	if !e.from.IsZero() {
		time.Sleep(time.Until(e.from))
		deadline = time.Now().Add(time.Minute)
	}
	want := ""
	switch word, _, _ := strings.Cut(e.comment, " "); strings.TrimRight(word, ":") {
	case "PASS", "FAIL", "READY", "BLOCKED":
		want = "Verdict: " + strings.TrimRight(word, ":")
	case "HOLDS":
		want = "negative control HOLDS"
	}
	// "FAIL: gate node, prepare_failed": the verdict names the gate and why.
	var wantAlso []string
	if m := demoGate.FindStringSubmatch(e.comment); m != nil {
		wantAlso = []string{"gate " + m[1] + " of", "(" + m[2] + ")"}
	}
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, "bash", "-c", e.command)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		cancel()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			return string(out), tries, err
		}
		var problem error
		switch {
		case code != e.exit:
			problem = fmt.Errorf("exit %d, want %d", code, e.exit)
		case want != "" && !strings.Contains(string(out), want):
			problem = fmt.Errorf("the output lacks %q", want)
		case len(wantAlso) > 0 && (!strings.Contains(string(out), wantAlso[0]) || !strings.Contains(string(out), wantAlso[1])):
			problem = fmt.Errorf("the output lacks %q or %q", wantAlso[0], wantAlso[1])
		case len(strings.TrimSpace(string(out))) == 0:
			problem = errors.New("no output")
		}
		if problem == nil {
			return string(out), tries, nil
		}
		if time.Now().After(deadline) {
			return string(out), tries, fmt.Errorf("%d tries: %w", tries, problem)
		}
		time.Sleep(2 * time.Second)
	}
}
