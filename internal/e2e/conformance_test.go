package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// The function SDKs' conformance suite (sdk/conformance/README.md): the cases
// are data (sdk/conformance/cases/*.yaml), each SDK has one handler program
// that serves them all (sdk/conformance/handlers/<sdk>), and this driver runs
// every case that applies to a kind against a real `cairn serve`, for every SDK
// and kind: exec and http for Go, Python and TypeScript, lambda for Go under
// AWS's Lambda emulator.

// envConformanceBigMiB sets the size of the large-output case in MiB (default
// 200, as the suite's specification says).
const envConformanceBigMiB = "CAIRN_CONFORMANCE_BIG_MIB"

// conformanceCase is one file of sdk/conformance/cases.
type conformanceCase struct {
	Name        string           `yaml:"name"`
	Description string           `yaml:"description"`
	Kinds       []string         `yaml:"kinds"`
	Input       any              `yaml:"input"`
	Steps       []map[string]any `yaml:"steps"`
	Script      []map[string]any `yaml:"script"`
}

// conformanceSDK is one SDK's handler, as each kind runs it.
type conformanceSDK struct {
	name string
	// files is the handler's tree (its program and the SDK), path → content and
	// mode; entry is the program's path in it.
	files map[string]treeFile
	entry string
	// serve is the command that serves the handler over http from the tree's
	// folder (CAIRN_FN_LISTEN set).
	serve []string
	// bootstrap is the Lambda bootstrap (Go only).
	bootstrap string
	// runtime is the interpreter the handler needs on PATH ("" for Go).
	runtime string
}

type treeFile struct {
	content []byte
	mode    os.FileMode
}

// TestConformance runs the conformance suite for every SDK and kind. Each
// SDK × kind gets a server (and its database) of its own and runs the cases
// one after the other (one of them restarts the server).
func TestConformance(t *testing.T) {
	t.Parallel()
	root, err := moduleRoot()
	require.NoError(t, err)
	bigMiB := 200
	if v := os.Getenv(envConformanceBigMiB); v != "" {
		bigMiB, err = strconv.Atoi(v)
		require.NoError(t, err, envConformanceBigMiB)
	}
	cases := loadConformanceCases(t, filepath.Join(root, "sdk", "conformance", "cases"), map[string]string{
		"big_mib":   strconv.Itoa(bigMiB),
		"big_bytes": strconv.Itoa(bigMiB << 20),
	})
	sdks := conformanceSDKs(t, root)
	for _, sdk := range sdks {
		if sdk.runtime != "" {
			if _, err := exec.LookPath(sdk.runtime); err != nil {
				t.Run(sdk.name, func(t *testing.T) {
					msg := sdk.runtime + " is not installed: `make tools` (scripts/install-sdk-runtimes.sh) installs it"
					if os.Getenv("CI") == "true" {
						t.Fatal(msg)
					}
					t.Skip(msg)
				})
				continue
			}
		}
		kinds := []string{"exec", "http"}
		if sdk.bootstrap != "" {
			kinds = append(kinds, "lambda")
		}
		for _, kind := range kinds {
			t.Run(sdk.name+"/"+kind, func(t *testing.T) {
				t.Parallel()
				runConformance(t, sdk, kind, cases)
			})
		}
	}
}

// loadConformanceCases reads every case, with vars (${name}) substituted in its
// text; ${run_id}, ${kind} and ${notify} are left for the driver.
func loadConformanceCases(t *testing.T, dir string, vars map[string]string) []conformanceCase {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, names, "no cases in %s", dir)
	sort.Strings(names)
	var cases []conformanceCase
	for _, name := range names {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		text := string(b)
		for k, v := range vars {
			text = strings.ReplaceAll(text, "${"+k+"}", v)
		}
		var c conformanceCase
		dec := yaml.NewDecoder(strings.NewReader(text))
		dec.KnownFields(true)
		require.NoError(t, dec.Decode(&c), "case %s", name)
		require.NotEmpty(t, c.Name, "case %s has no name", name)
		cases = append(cases, c)
	}
	return cases
}

// conformanceSDKs builds the Go handler and gathers the Python and TypeScript
// ones with their SDKs.
func conformanceSDKs(t *testing.T, root string) []conformanceSDK {
	t.Helper()
	handlers := filepath.Join(root, "sdk", "conformance", "handlers")
	bin := t.TempDir()
	require.NoError(t, os.Chmod(bin, 0o755))
	// One build serves every kind: fn.Run serves Lambda when the emulator sets
	// AWS_LAMBDA_RUNTIME_API (the rpc mode that lambda.norpc leaves out is only
	// for the retired go1.x runtime).
	prog := filepath.Join(bin, "handler")
	cmd := exec.Command("go", "build", "-o", prog, "./sdk/conformance/handlers/go")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build the Go handler: %s", out)
	// The exec bundles start the program by its path rather than carry its
	// megabytes: packing a bundle under the race detector costs seconds a
	// megabyte, six times a kind. exec replaces the shell, so the program is the
	// handler Cairn runs (its stdin, stdout, fd 3, pid); the servers run handlers
	// unisolated (launch), so they see the test's folder.
	goExec := []byte("#!/bin/sh\nexec " + prog + " \"$@\"\n")

	python := map[string]treeFile{"handler.py": readTreeFile(t, filepath.Join(handlers, "python", "handler.py"), 0o755)}
	addTree(t, python, filepath.Join(root, "sdk", "python", "cairn_fn"), "cairn_fn", ".py")
	ts := map[string]treeFile{"handler.mjs": readTreeFile(t, filepath.Join(handlers, "ts", "handler.mjs"), 0o755)}
	addTree(t, ts, filepath.Join(root, "sdk", "ts"), "node_modules/@cairnrun/fn", ".mjs", ".json", ".d.ts")

	return []conformanceSDK{
		{name: "go", files: map[string]treeFile{"handler": {goExec, 0o755}}, entry: "handler", serve: []string{prog}, bootstrap: prog},
		{name: "python", files: python, entry: "handler.py", serve: []string{"python3", "handler.py"}, runtime: "python3"},
		{name: "ts", files: ts, entry: "handler.mjs", serve: []string{"node", "handler.mjs"}, runtime: "node"},
	}
}

func readTreeFile(t *testing.T, path string, mode os.FileMode) treeFile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return treeFile{b, mode}
}

// addTree adds the files of dir (not its tests) whose names end in one of exts
// to files, under prefix.
func addTree(t *testing.T, files map[string]treeFile, dir, prefix string, exts ...string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != dir && (name == "test" || name == "tests" || name == "__pycache__" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		for _, ext := range exts {
			if strings.HasSuffix(p, ext) && !strings.HasPrefix(d.Name(), "test_") {
				rel, err := filepath.Rel(dir, p)
				if err != nil {
					return err
				}
				files[filepath.ToSlash(filepath.Join(prefix, rel))] = readTreeFile(t, p, 0o644)
				return nil
			}
		}
		return nil
	}))
}

// writeFiles writes a tree into a new folder and returns it.
func writeFiles(t *testing.T, files map[string]treeFile) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	for p, f := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, f.content, f.mode))
	}
	return dir
}

// notifications collects what handlers POST to the test (a callback URL, a
// peak RSS), by run.
type notifications struct {
	mu    sync.Mutex
	byRun map[string][]map[string]any
}

func (n *notifications) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m map[string]any
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	run, _ := m["run_id"].(string)
	n.mu.Lock()
	n.byRun[run] = append(n.byRun[run], m)
	n.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// wait returns the first notification of run that has field.
func (n *notifications) wait(t *testing.T, run, field string) any {
	t.Helper()
	var v any
	require.Eventually(t, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, m := range n.byRun[run] {
			if x, ok := m[field]; ok {
				v = x
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "waiting for the handler of run %s to report %s", run, field)
	return v
}

// conformanceEnv is what one SDK × kind's cases share.
type conformanceEnv struct {
	t        *testing.T
	sdk      conformanceSDK
	kind     string
	st       *stack
	opts     serverOptions
	srv      *server
	api      *apiClient
	notify   *notifications
	notifyTo string
	fnURL    string // http: the handler's URL
}

func runConformance(t *testing.T, sdk conformanceSDK, kind string, cases []conformanceCase) {
	n := &notifications{byRun: map[string][]map[string]any{}}
	ns := httptest.NewServer(n)
	t.Cleanup(ns.Close)
	e := &conformanceEnv{t: t, sdk: sdk, kind: kind, notify: n, notifyTo: ns.URL}

	var stOpts stackOptions
	if kind != "exec" {
		// Presigned URLs ($blob inputs of http and lambda functions) need S3.
		s3, bucket := testenv.S3Bucket(t)
		stOpts = stackOptions{blobURL: s3.URL(bucket), env: s3.Env()}
	}
	switch kind {
	case "http":
		e.fnURL = startHTTPHandler(t, sdk)
	case "lambda":
		emu := testenv.StartLambdaEmulator(t, sdk.bootstrap, nil)
		// The emulator runs one invocation at a time: so does the server.
		e.opts.env = []string{"CAIRN_LAMBDA_ENDPOINT=" + emu.Endpoint, "CAIRN_LAMBDA_EMULATOR=true", "CAIRN_CONCURRENCY=1"}
	}
	e.st = newStack(t, stOpts)
	e.srv = e.st.start(e.opts)
	e.api = e.srv.api()
	for _, c := range cases {
		if !contains(c.Kinds, kind) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) { e.run(t, c) })
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// startHTTPHandler runs the SDK's handler as an http function on a free port
// and returns its URL.
func startHTTPHandler(t *testing.T, sdk conformanceSDK) string {
	t.Helper()
	dir := writeFiles(t, sdk.files)
	for try := 1; ; try++ {
		port, err := freePort()
		require.NoError(t, err)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		var out bytes.Buffer
		cmd := exec.Command(sdk.serve[0], sdk.serve[1:]...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CAIRN_FN_LISTEN="+addr, "CAIRN_SIGNING_KEY="+signingKey)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		// Started and waited for from a goroutine locked to its thread, as the
		// servers are (launch): Pdeathsig follows the thread that started it.
		started, exited := make(chan error, 1), make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer close(exited)
			if err := cmd.Start(); err != nil {
				started <- err
				return
			}
			started <- nil
			_ = cmd.Wait()
		}()
		require.NoError(t, <-started)
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			if t.Failed() {
				t.Logf("%s http handler's output:\n%s", sdk.name, out.String())
			}
		})
		url := "http://" + addr + "/"
		// Wait until it listens: an unsigned POST is refused with 401.
		up := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			select {
			case <-exited:
			default:
				resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
				if err == nil {
					resp.Body.Close()
					require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an unsigned call is refused")
					up = true
				}
			}
			if up {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if up {
			return url
		}
		require.Less(t, try, 3, "the %s http handler did not listen:\n%s", sdk.name, out.String())
	}
}

// run deploys a case's workflow, starts a run and follows its script.
func (e *conformanceEnv) run(t *testing.T, c conformanceCase) {
	workflow := "conformance-" + c.Name
	files := map[string]treeFile{}
	steps := make([]map[string]any, len(c.Steps))
	for i, s := range c.Steps {
		step := map[string]any{}
		for k, v := range s {
			step[k] = v
		}
		if step["handler"] == true {
			delete(step, "handler")
			switch e.kind {
			case "exec":
				step["exec"] = []string{"./" + e.sdk.entry}
			case "http":
				step["http"] = map[string]any{"url": e.fnURL}
			case "lambda":
				step["lambda"] = map[string]any{"function": "conformance"}
			}
		}
		steps[i] = e.subst(step, "").(map[string]any)
	}
	if e.kind == "exec" {
		files = e.sdk.files
	}
	manifest, err := yaml.Marshal(map[string]any{"name": workflow, "steps": steps})
	require.NoError(t, err)
	tree := map[string]treeFile{"cairn.yaml": {manifest, 0o644}}
	for p, f := range files {
		tree[p] = f
	}
	e.deploy(t, tree)

	id := e.api.in(t).startRun(workflow, 0, c.Input)
	t.Logf("run %s of %s (%s %s)", id, workflow, e.sdk.name, e.kind)
	for i, action := range c.Script {
		require.Len(t, action, 1, "script entry %d of %s: one action", i, c.Name)
		for name, arg := range action {
			e.act(t, id, name, e.subst(arg, id))
		}
	}
}

// deploy packs a tree into a bundle and uploads it.
func (e *conformanceEnv) deploy(t *testing.T, tree map[string]treeFile) {
	t.Helper()
	dir := writeFiles(t, tree)
	var buf bytes.Buffer
	_, err := bundle.Pack(context.Background(), dir, &buf)
	require.NoError(t, err)
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	_, err = e.api.cl.UploadBundle(ctx, &buf)
	require.NoError(t, err)
}

// subst replaces ${run_id}, ${kind} and ${notify} in the strings of v.
func (e *conformanceEnv) subst(v any, runID string) any {
	switch x := v.(type) {
	case string:
		return strings.NewReplacer("${run_id}", runID, "${kind}", e.kind, "${notify}", e.notifyTo).Replace(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, v := range x {
			out[k] = e.subst(v, runID)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = e.subst(v, runID)
		}
		return out
	}
	return v
}

// act performs one script action.
func (e *conformanceEnv) act(t *testing.T, id, name string, arg any) {
	t.Helper()
	args, _ := arg.(map[string]any)
	step, _ := args["step"].(string)
	api := e.api.in(t)
	switch name {
	case "wait_run":
		run := api.waitRun(id, 3*time.Minute)
		require.Equal(t, arg, string(run.Status), "run %s: %s", id, jsonOf(api.mustSteps(id)))
	case "wait_step":
		want, _ := args["status"].(string)
		api.waitStep(id, step, 2*time.Minute, want, func(s client.Step) bool { return string(s.Status) == want })
	case "wait_checkpoint":
		api.waitStep(id, step, 2*time.Minute, "has a checkpoint", func(s client.Step) bool { return s.Checkpoint != nil })
	case "restart_server":
		require.Equal(t, "sigkill", arg)
		e.srv.kill()
		e.srv = e.st.start(e.opts)
		e.api = e.srv.api()
	case "callback":
		url, _ := e.notify.wait(t, id, "callback_url").(string)
		body, err := json.Marshal(args["body"])
		require.NoError(t, err)
		code, text := postCallback(t, url, "application/json", body)
		require.Equal(t, http.StatusOK, code, text)
	case "output":
		got := api.mustStep(id, step).Output
		if want, ok := args["equals"]; ok {
			requireJSONEqual(t, want, got, "output of %s", step)
		}
		if fields, ok := args["fields"].(map[string]any); ok {
			obj, _ := got.(map[string]any)
			for f, cond := range fields {
				checkField(t, step+"."+f, obj[f], cond.(map[string]any))
			}
		}
	case "output_size":
		ref, _ := api.mustStep(id, step).Output.(map[string]any)
		blob, _ := ref["$blob"].(map[string]any)
		require.NotNil(t, blob, "the output of %s is a $blob: %v", step, ref)
		requireJSONEqual(t, args["bytes"], blob["size"], "size of the output of %s", step)
	case "peak_rss":
		rss, _ := e.notify.wait(t, id, "peak_rss_bytes").(float64)
		limit := args["max_mib"].(int) << 20
		t.Logf("%s %s handler: peak RSS %.1f MiB while streaming the output (bound %d MiB)", e.sdk.name, e.kind, rss/(1<<20), limit>>20)
		require.Positive(t, rss, "the handler measured its peak RSS")
		require.Less(t, rss, float64(limit), "the handler's peak RSS")
	case "attempts":
		require.Len(t, api.mustAttempts(id, step), args["count"].(int), "attempts of %s", step)
	case "error":
		lastErr, _ := api.mustStep(id, step).LastError.(map[string]any)
		require.NotNil(t, lastErr, "step %s has an error", step)
		if want, ok := args["retryable"]; ok {
			require.Equal(t, want, lastErr["retryable"], "retryable: %v", lastErr)
		}
		if want, ok := args["message_contains"].(string); ok {
			require.Contains(t, lastErr["message"], want)
		}
		if want, ok := args["handler_code"]; ok {
			require.Equal(t, want, lastErr["handler_code"], "the handler's own code: %v", lastErr)
		}
	default:
		t.Fatalf("unknown script action %q", name)
	}
}

// checkField checks one output field against {equals|min: N}.
func checkField(t *testing.T, what string, got any, cond map[string]any) {
	t.Helper()
	if want, ok := cond["equals"]; ok {
		requireJSONEqual(t, want, got, what)
	}
	if minV, ok := cond["min"].(int); ok {
		n, isNum := got.(float64)
		require.True(t, isNum && n >= float64(minV), "%s = %v, want at least %d", what, got, minV)
	}
}

// requireJSONEqual compares two values as JSON (YAML's ints and JSON's floats
// alike).
func requireJSONEqual(t *testing.T, want, got any, msgAndArgs ...any) {
	t.Helper()
	norm := func(v any) any {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var out any
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}
	w, g := norm(want), norm(got)
	if !reflect.DeepEqual(w, g) {
		require.Fail(t, fmt.Sprintf("want %s\n got %s", jsonOf(w), jsonOf(g)), msgAndArgs...)
	}
}
