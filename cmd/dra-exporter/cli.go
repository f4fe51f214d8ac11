package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
)

// Each command parses its arguments with a kingpin Application of its own
// rather than one Application with a command each: promslog's flag helper
// takes an Application, serve and node give --web.listen-address different
// defaults (:9877, :9878), and gates or bundle have no use for --log.* or
// --web.*. run dispatches on the first argument, and the listing of the
// commands is itself rendered by kingpin (commandList).

// newApp returns the Application of one command, prog as it was invoked
// ("dra-exporter gates", "kubectl dra-exporter gates"): its help (-h, --help) on
// stdout, its usage errors on stderr.
func newApp(prog, help string, stdout, stderr io.Writer) *kingpin.Application {
	app := kingpin.New(prog, help).UsageWriter(stdout).ErrorWriter(stderr)
	app.HelpFlag.Short('h')
	app.Version(version.Print("dra-exporter"))
	return app
}

// parse parses args into app's flags and arguments. It reports false when
// the command is done, with the status to exit with: 0 after the help, 2
// after a usage error, which kingpin words on stderr.
func parse(app *kingpin.Application, args []string) (rc int, ok bool) {
	// kingpin ends the process after the help; here the command returns.
	terminated := -1
	app.Terminate(func(code int) {
		if terminated < 0 {
			terminated = code
		}
	})
	args, err := explicitBools(app, args)
	if err == nil {
		_, err = app.Parse(args)
	}
	switch {
	case terminated == 0:
		return 0, false
	case terminated > 0:
		return 2, false
	case err != nil:
		app.Errorf("%s, try --help", err)
		return 2, false
	}
	return 0, true
}

// explicitBools rewrites --flag=true and --flag=false of app's boolean
// flags as kingpin spells them, --flag and --no-flag. Deployments and
// scripts written for the standard library's flags pass them so, and
// kingpin would take the value for a positional argument.
func explicitBools(app *kingpin.Application, args []string) ([]string, error) {
	bools := map[string]bool{}
	for _, f := range app.Model().Flags {
		if f.IsBoolFlag() {
			bools[f.Name] = true
		}
	}
	out := make([]string, 0, len(args))
	for i, arg := range args {
		if arg == "--" {
			return append(out, args[i:]...), nil
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !strings.HasPrefix(arg, "--") || !hasValue || !bools[name] {
			out = append(out, arg)
			continue
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a boolean (true or false)", name, value)
		}
		if b {
			out = append(out, "--"+name)
		} else {
			out = append(out, "--no-"+name)
		}
	}
	return out, nil
}
