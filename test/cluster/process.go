package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is a program the harness started: a component of the control
// plane or of the real node (test/node). It logs to a file of its own, runs
// in a process group of its own, and dies with the test binary even when
// that is killed.
type Process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// StartProcess starts binary with args, the harness's environment plus
// env, its output appended to logPath.
func StartProcess(name, binary, logPath string, env []string, args ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills its process group.
func (p *Process) Stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Exited says why the process ended, with the tail of its log; nil while
// it runs.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); log:\n%s", p.name, p.err, Tail(p.log, 30))
	default:
		return nil
	}
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }
