package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func requireNamespaces(t *testing.T) {
	t.Helper()
	if err := CanRun(); err != nil {
		if os.Getenv(EnvSkip) == "1" {
			t.Skipf("%s=1: %v", EnvSkip, err)
		}
		t.Fatalf("cannot run a real node here: %v", err)
	}
}

// TestLeftoversFindsWhatANodeLeaves: the teardown check is not blind. A
// process left in a node's mount namespace and a cgroup left under its
// cgroupRoot are both reported, and KillNamespace stops the process.
func TestLeftoversFindsWhatANodeLeaves(t *testing.T) {
	requireNamespaces(t)
	dir := t.TempDir()
	before := snapshotCovered()

	sleeper := exec.Command("sleep", "60")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(done) }()
	mntNS, err := os.Readlink("/proc/" + strconv.Itoa(sleeper.Process.Pid) + "/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if err := createCgroups(cgroupName(dir)); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = removeCgroups(cgroupName(dir)) }()

	// Only the PID is certain: the sleeper may still be inside execve, its
	// command line not yet mapped (CI saw "process 1922: " under load).
	left := strings.Join(Leftovers(dir, mntNS, before), "\n")
	if !strings.Contains(left, "process "+strconv.Itoa(sleeper.Process.Pid)+": ") {
		t.Errorf("the process in the node's namespace is not reported:\n%s", left)
	}
	if !strings.Contains(left, "cgroup: ") || !strings.Contains(left, filepath.Base(dir)) {
		t.Errorf("the node's cgroups are not reported:\n%s", left)
	}

	if n := KillNamespace(mntNS); n != 1 {
		t.Errorf("KillNamespace killed %d processes, want 1", n)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the process outlived KillNamespace")
	}
	if err := removeCgroups(cgroupName(dir)); err != nil {
		t.Fatal(err)
	}
	if left := Leftovers(dir, mntNS, before); len(left) > 0 {
		t.Errorf("left after the cleanup: %v", left)
	}
}

// TestOCIArchive: the test images are OCI archives containerd can import:
// an oci-layout, an index naming the image, and blobs whose digests match.
func TestOCIArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "prog.tar")
	if err := writeOCIArchive(archive, "localhost/x/prog:v1", bin, "/prog"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("tar", "-tf", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	names := strings.Fields(string(out))
	if len(names) != 5 || names[0] != "oci-layout" || names[1] != "index.json" {
		t.Fatalf("archive entries: %v", names)
	}
	x := exec.Command("tar", "-xf", archive, "-C", dir)
	if out, err := x.CombinedOutput(); err != nil {
		t.Fatalf("untar: %v: %s", err, out)
	}
	index, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if !strings.Contains(string(index), `"io.containerd.image.name":"localhost/x/prog:v1"`) {
		t.Errorf("index.json does not name the image: %s", index)
	}
	for _, n := range names[2:] {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if d := descriptor("", data); blobPath(d) != n {
			t.Errorf("blob %s has digest %s", n, d.Digest)
		}
	}
}
