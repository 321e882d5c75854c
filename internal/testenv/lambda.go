package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// lambdaEmulatorBinary is the command of AWS's Lambda Runtime Interface
	// Emulator, which `make tools` installs (LambdaEmulatorInstallHint).
	lambdaEmulatorBinary = "aws-lambda-rie"
	// LambdaEmulatorInstallHint says how to install the emulator, at the
	// version the Makefile pins (RIE_VERSION).
	LambdaEmulatorInstallHint = "AWS's Lambda Runtime Interface Emulator (aws-lambda-rie) is not installed: `make tools`, or " +
		"`go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d`"
	// lambdaHelloPackage is the example function the tests run in the emulator.
	lambdaHelloPackage = "github.com/cairnrun/cairn/examples/lambda-hello/function"
	// lambdaStartTimeout bounds how long the emulator may take to listen.
	lambdaStartTimeout = 30 * time.Second
)

// lambdaHelloBuild is the example function of this test binary, built once:
// package state for the same reason as cairnBuild.
var lambdaHelloBuild struct {
	once sync.Once
	path string
	err  error
}

// LambdaHello returns the path of the lambda-hello example function
// (examples/lambda-hello/function) built as a custom runtime's bootstrap, as
// `make lambda-zip` builds it (-tags lambda.norpc, no cgo) but for this
// machine. The first call of a test binary builds it; a failed build fails
// every caller's test. It is safe for concurrent use. Its folder is named
// after the test binary's pid, and removed by a later run once that pid is
// gone (like CairnBinary's).
func LambdaHello(t testing.TB) string {
	t.Helper()
	lambdaHelloBuild.once.Do(func() {
		lambdaHelloBuild.path, lambdaHelloBuild.err = buildLambdaHello()
	})
	if lambdaHelloBuild.err != nil {
		t.Fatalf("testenv: %v", lambdaHelloBuild.err)
	}
	return lambdaHelloBuild.path
}

func buildLambdaHello() (string, error) {
	binRemoveStale()
	dir, err := os.MkdirTemp("", binTempDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("build lambda-hello: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("build lambda-hello: %w", err)
	}
	path := filepath.Join(dir, "bootstrap")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", path, lambdaHelloPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go build %s: %v\n%s", lambdaHelloPackage, err, out)
	}
	return path, nil
}

// LambdaEmulatorConfig tunes StartLambdaEmulator. The zero value is usable.
type LambdaEmulatorConfig struct {
	// FunctionTimeout is the function's own timeout (AWS_LAMBDA_FUNCTION_TIMEOUT,
	// whole seconds): past it the emulator kills the runtime and answers "Task
	// timed out after N.00 seconds". Default 60s.
	FunctionTimeout time.Duration
}

// LambdaEmulator is AWS's Lambda Runtime Interface Emulator running one
// function, for one test.
//
// What it is and is not: it runs the function's real bootstrap behind the real
// Runtime API, so aws-lambda-go's runtime loop, the payload's way in and out
// and the function's errors are Lambda's; and it serves the real Invoke path,
// so aws-sdk-go-v2 reaches it with a custom endpoint. But it serves one
// function, named "function"; it answers every invocation with 200 and no
// X-Amz-Function-Error (a function error is only told by its payload); it
// checks no signature; and it runs one invocation at a time: a second one
// while another is in flight crashes it. An invocation whose caller gave up
// (a Cairn step timeout) goes on until the function returns or its own
// timeout (FunctionTimeout) ends it.
type LambdaEmulator struct {
	// Endpoint is the base URL of its Invoke API, "http://127.0.0.1:<port>".
	Endpoint string

	pid     int
	exited  <-chan error
	logPath string
}

// StartLambdaEmulator runs the emulator (aws-lambda-rie from PATH, $GOBIN or
// $(go env GOPATH)/bin) with bootstrap as the function, on free ports of
// 127.0.0.1 (its Invoke API and the Runtime API its function polls), waits
// until it listens, and kills it and its function when the test ends; a
// failed test logs the emulator's output (the function's log among it).
// Without the emulator it skips the test, or fails it when CI=true.
func StartLambdaEmulator(t testing.TB, bootstrap string, cfg *LambdaEmulatorConfig) *LambdaEmulator {
	t.Helper()
	bin := findGoTool(lambdaEmulatorBinary)
	if bin == "" {
		unavailable(t, LambdaEmulatorInstallHint)
	}
	if cfg == nil {
		cfg = &LambdaEmulatorConfig{}
	}
	timeout := cfg.FunctionTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	dir := t.TempDir()
	// Another process may take a free port between our probe and the
	// emulator's bind: try a few.
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		invokeAddr, err := s3FreeAddr()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		runtimeAddr, err := s3FreeAddr()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		e := &LambdaEmulator{Endpoint: "http://" + invokeAddr, logPath: filepath.Join(dir, fmt.Sprintf("aws-lambda-rie-%d.log", attempt))}
		args := []string{
			"--runtime-interface-emulator-address", invokeAddr,
			"--runtime-api-address", runtimeAddr,
			bootstrap,
		}
		env := append(os.Environ(),
			"AWS_LAMBDA_FUNCTION_TIMEOUT="+strconv.Itoa(int((timeout+time.Second-1)/time.Second)),
			"AWS_LAMBDA_FUNCTION_NAME=cairn-hello",
		)
		if err := e.start(bin, args, env); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := s3WaitReady(e.Endpoint+"/", lambdaStartTimeout, e.exited); err != nil {
			e.kill()
			logText, _ := os.ReadFile(e.logPath)
			lastErr = fmt.Errorf("aws-lambda-rie on %s: %w; its output:\n%s", invokeAddr, err, strings.TrimSpace(string(logText)))
			continue
		}
		t.Cleanup(func() {
			e.kill()
			if t.Failed() {
				logText, _ := os.ReadFile(e.logPath)
				t.Logf("output of aws-lambda-rie (the function's log among it):\n%s", logText)
			}
		})
		return e
	}
	t.Fatalf("testenv: %v", lastErr)
	return nil
}

// start runs the emulator from a goroutine locked to its OS thread, for the
// parent-death signal (see s3RunVersitygw).
func (e *LambdaEmulator) start(bin string, args, env []string) error {
	logFile, err := os.Create(e.logPath)
	if err != nil {
		return fmt.Errorf("aws-lambda-rie: %w", err)
	}
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer logFile.Close()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = s3SysProcAttr()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start aws-lambda-rie: %w", err)
			return
		}
		e.pid = cmd.Process.Pid
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return err
	}
	e.exited = done
	return nil
}

// kill stops the function's runtime and then the emulator, with SIGKILL, and
// waits for the emulator to end. The emulator starts the runtime in a process
// group of its own, which the parent-death signal does not reach: its
// children are found in /proc and their groups killed first.
func (e *LambdaEmulator) kill() {
	for _, pid := range childPIDs(e.pid) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(e.pid, syscall.SIGKILL)
	<-e.exited
}

// childPIDs returns the processes whose parent is pid (Linux's /proc; none
// elsewhere).
func childPIDs(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …": comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if child, err := strconv.Atoi(strings.Fields(s)[0]); err == nil {
			out = append(out, child)
		}
	}
	return out
}

// findGoTool returns the path of a command that `go install` put in PATH,
// $GOBIN, $(go env GOBIN) or a GOPATH's bin folder, or "".
func findGoTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 {
			if gobin := strings.TrimSpace(lines[0]); gobin != "" {
				dirs = append(dirs, gobin)
			}
			for _, gopath := range filepath.SplitList(strings.TrimSpace(lines[1])) {
				dirs = append(dirs, filepath.Join(gopath, "bin"))
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin")) // GOPATH's default
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
