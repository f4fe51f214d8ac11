// Command dra-exporter makes Kubernetes Dynamic Resource Allocation
// observable: it serves Prometheus metrics that join claims, devices,
// ResourceSlices and pods (serve), renders the same metrics from a file of
// objects (snapshot), and explains why one pod is not Ready (explain).
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
)

// command is one of the binary's commands: its line in the listing and
// the function that parses its arguments and runs it.
type command struct {
	name, help string
	// run parses the arguments and runs the command; prog is how it was
	// invoked ("dra-exporter gates", "kubectl dra-exporter gates"), for its help
	// and its error messages.
	run func(prog string, args []string, stdout, stderr io.Writer) int
}

// commands lists the binary's commands; serve is the default.
func commands() []command {
	return []command{
		{"serve", "Watch the cluster and serve metrics (the default command).", serve},
		{"node", "The node agent: GPU telemetry joined to pods, claims and devices (one per GPU node).", node},
		{"gpu-check", "Read this host's GPUs as the node agent does and compare with nvidia-smi.", gpuCheck},
		{"snapshot", "Print the metrics for a file of objects (kubectl get -o yaml).", snapshot},
		{"explain", "Walk the decision tree for one pod, live or from files.", explain},
		{"gates", "The evidence gates and the rollout verdict of a canary, from Prometheus or a bundle.", gates},
		{"bundle", "Save the evidence of a cluster (objects, versions, agents' GPU inventory) to a file.", bundleCmd},
		{"docs", "Print the metrics reference (docs/metrics.md).", docs},
		{"version", "Print the version.", versionCmd},
	}
}

// pluginCommands are the commands of the binary installed as kubectl-dra_exporter:
// those an operator runs by hand, not the exporter or the node agent.
var pluginCommands = []string{"explain", "gates", "bundle", "version"}

func main() {
	if isPlugin(os.Args[0]) {
		os.Exit(runPlugin(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// isPlugin reports whether the binary was started as the kubectl plugin
// (kubectl runs kubectl-dra_exporter for "kubectl dra-exporter"; krew installs it so).
func isPlugin(argv0 string) bool {
	name := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	return name == "kubectl-dra_exporter"
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	list := commandList("dra-exporter", "Kubernetes Dynamic Resource Allocation exporter: metrics that join claims, devices, "+
		"ResourceSlices and pods, a node agent, and the commands that read them. Run \"dra-exporter COMMAND --help\" for a command's flags; "+
		"without a command, the arguments are serve's.", cmds, "serve")
	name := "serve"
	if len(args) > 0 {
		switch {
		case isHelpFlag(args[0]):
			list(stdout)
			return 0
		case isBinaryFlag(args[0]):
			return binaryFlag("dra-exporter", "dra-exporter", cmds, "serve", args, stdout, stderr)
		case !strings.HasPrefix(args[0], "-"):
			name, args = args[0], args[1:]
		}
	}
	return dispatch("dra-exporter", cmds, list, name, args, stdout, stderr)
}

// runPlugin serves "kubectl dra-exporter".
func runPlugin(args []string, stdout, stderr io.Writer) int {
	var cmds []command
	for _, c := range commands() {
		if slices.Contains(pluginCommands, c.name) {
			cmds = append(cmds, c)
		}
	}
	list := commandList("kubectl dra-exporter", "The DRA decision tree of a pod, the evidence gates of a canary and the evidence bundle of a cluster, "+
		"from dra-exporter. Run \"kubectl dra-exporter COMMAND --help\" for a command's flags.", cmds, "")
	switch {
	case len(args) == 0:
		list(stderr)
		return 2
	case isHelpFlag(args[0]):
		list(stdout)
		return 0
	case isBinaryFlag(args[0]):
		return binaryFlag("kubectl dra-exporter", "kubectl-dra_exporter", cmds, "", args, stdout, stderr)
	}
	return dispatch("kubectl dra-exporter", cmds, list, args[0], args[1:], stdout, stderr)
}

// dispatch runs the command name of cmds; "help" lists them, "help
// COMMAND" prints a command's help.
func dispatch(prog string, cmds []command, list func(io.Writer), name string, args []string, stdout, stderr io.Writer) int {
	if name == "help" {
		if len(args) == 0 || args[0] == "help" {
			list(stdout)
			return 0
		}
		name, args = args[0], []string{"--help"}
	}
	for _, c := range cmds {
		if c.name == name {
			return c.run(prog+" "+c.name, args, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "%s: error: unknown command %q, try --help\n", prog, name)
	return 2
}

func isHelpFlag(arg string) bool { return arg == "-h" || arg == "--help" }

// isBinaryFlag reports whether arg is a flag of the binary rather than of
// a command: --version, and shell completion's.
func isBinaryFlag(arg string) bool {
	return arg == "--version" || arg == "--completion-script-bash" || arg == "--completion-bash"
}

// binaryFlag answers the binary's flags (isBinaryFlag) of the binary file
// named bin, invoked as prog.
func binaryFlag(prog, bin string, cmds []command, defaultCmd string, args []string, stdout, stderr io.Writer) int {
	switch args[0] {
	case "--completion-script-bash":
		fmt.Fprint(stdout, bashCompletionScript(bin))
		return 0
	case "--completion-bash":
		return complete(prog, cmds, defaultCmd, args[1:], stdout, stderr)
	}
	fmt.Fprintln(stdout, version.Print("dra-exporter"))
	return 0
}

// commandList returns a function that writes the listing of cmds as kingpin
// lists an Application's commands.
func commandList(prog, help string, cmds []command, defaultCmd string) func(io.Writer) {
	return func(w io.Writer) {
		app := kingpin.New(prog, help).UsageWriter(w).ErrorWriter(w).Terminate(nil)
		app.HelpFlag.Short('h')
		for _, c := range cmds {
			clause := app.Command(c.name, c.help)
			if c.name == defaultCmd {
				clause.Default()
			}
		}
		app.Usage(nil)
	}
}

func versionCmd(prog string, args []string, stdout, stderr io.Writer) int {
	app := newApp(prog, "Prints the version, revision, branch, build user and date, and Go version of the binary.", stdout, stderr)
	if rc, ok := parse(app, args); !ok {
		return rc
	}
	fmt.Fprintln(stdout, version.Print("dra-exporter"))
	return 0
}
