// Package proc starts the benchmark's child processes (PostgreSQL, versitygw, cairn)
// so that they die with the benchmark, and reads what /proc says about them and about
// the machine.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Child is a started process. Wait for its end on Done; Err holds exec.Cmd.Wait's
// result once Done is closed.
type Child struct {
	Pid     int
	Started time.Time
	done    chan struct{}
	err     error
}

// Done is closed once the process has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Err returns how the process ended; valid once Done is closed.
func (c *Child) Err() error { return c.err }

// Exited reports whether the process has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Start runs cmd with deathSig delivered by the kernel when the benchmark dies,
// however it dies. Linux sends the parent-death signal when the thread that forked
// the child exits, so the goroutine that starts it stays locked to its thread for
// the child's whole life.
func Start(cmd *exec.Cmd, deathSig syscall.Signal) (*Child, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = deathSig
	c := &Child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		c.Started = time.Now()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.Pid = cmd.Process.Pid
		started <- nil
		c.err = cmd.Wait()
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return c, nil
}

// Signal sends sig to the process; a process that already ended is not an error.
func (c *Child) Signal(sig syscall.Signal) error {
	if c.Exited() {
		return nil
	}
	err := syscall.Kill(c.Pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", c.Pid, err)
	}
	return nil
}

// Stop sends sig and waits up to grace for the end, then SIGKILLs and waits. It
// reports whether the process ended within grace.
func (c *Child) Stop(sig syscall.Signal, grace time.Duration) bool {
	_ = c.Signal(sig)
	select {
	case <-c.done:
		return true
	case <-time.After(grace):
	}
	_ = c.Signal(syscall.SIGKILL)
	<-c.done
	return false
}

// Kill sends SIGKILL and waits for the end.
func (c *Child) Kill() {
	_ = c.Signal(syscall.SIGKILL)
	<-c.done
}

// FreeAddr returns "127.0.0.1:<port>" of a port that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := netListen()
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}

// TailFile returns the last n bytes of a file, for error messages.
func TailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// WaitReady polls url (a readiness endpoint) until it answers 200, and returns
// nil then; an error, with the tail of the log at logPath, when c exits, ctx
// ends or timeout passes first.
func WaitReady(ctx context.Context, url string, c *Child, logPath string, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if c.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready: %v; log:\n%s", err, TailFile(logPath, 4096))
		}
		time.Sleep(2 * time.Millisecond)
	}
}
