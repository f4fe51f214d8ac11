package gpufake

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/node/gpu"
)

// goDCGMDir is go-dcgm's pkg/dcgm in the module cache, at the version
// go.mod pins.
func goDCGMDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/go-dcgm").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		t.Skipf("go-dcgm's source is not in the module cache (go mod download): %v", err)
	}
	return filepath.Join(dir, "pkg", "dcgm")
}

func sourceLine(t *testing.T, dir, at string) string {
	t.Helper()
	file, n, ok := strings.Cut(at, ":")
	line, err := strconv.Atoi(n)
	if !ok || err != nil {
		t.Fatalf("bad source %q", at)
	}
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 1; sc.Scan(); i++ {
		if i == line {
			return sc.Text()
		}
	}
	t.Fatalf("%s has no line %d", file, line)
	return ""
}

// Every row of the error-shape table is checked against the go-dcgm line
// it cites: a coded row's line builds a *dcgm.Error, a plain row's line
// formats DCGM's message after the row's prefix.
func TestErrorShapesMatchGoDCGM(t *testing.T) {
	dir := goDCGMDir(t)
	for call, shape := range dcgmErrShapes {
		line := sourceLine(t, dir, shape.source)
		var want string
		switch {
		case shape.coded:
			want = "&Error{msg: C.GoString(C.errorString(result)), Code: result}"
		case shape.prefix == "":
			want = "return errorString(result)"
		default:
			want = `fmt.Errorf("` + shape.prefix + `%s", `
			if !strings.HasSuffix(strings.TrimSpace(line), "err)") {
				t.Errorf("%s: go-dcgm %s does not format the error it got: %q", call, shape.source, line)
			}
		}
		if !strings.Contains(line, want) {
			t.Errorf("%s: go-dcgm %s reads %q, want it to contain %q", call, shape.source, strings.TrimSpace(line), want)
		}
	}
}

// The fake answers each call in its shape: a coded call's code survives,
// a plain call's does not (errors.As finds no *DCGMError) and only DCGM's
// message at the end of the text tells the status.
func TestFakeErrorsHaveGoDCGMShapes(t *testing.T) {
	for call, shape := range dcgmErrShapes {
		err := dcgmFail(call, gpu.StConnectionNotValid, 1, 2)
		var de *gpu.DCGMError
		if coded := errors.As(err, &de); coded != shape.coded {
			t.Errorf("%s: coded %v, want %v (%v)", call, coded, shape.coded, err)
		}
		if !strings.HasSuffix(err.Error(), gpu.DCGMErrorText(gpu.StConnectionNotValid)) && !shape.coded {
			t.Errorf("%s: %q does not end with DCGM's message", call, err)
		}
	}
}
