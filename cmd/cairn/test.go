package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/testrun"
)

// testFlags are `cairn test`'s options.
type testFlags struct {
	junit        string
	parallel     int
	allowNetwork bool
	replay       []string
	run          string
	verbose      bool
	with         []string
}

func newTestCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var f testFlags
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run a bundle's workflow test cases (DIR/tests/*.yaml) on an embedded catalog with a virtual clock",
		Long: `test runs the test cases in DIR/tests/*.yaml (DIR defaults to the current folder)
on the real state machine: a private PostgreSQL started from the installed binaries
(as cairn dev starts one), migrated, with the bundle deployed. Each case has its own
database, its mocks answer the steps it names, the other steps run their real
handlers, and a virtual clock jumps to the next due time (sleeps, timeouts,
deadlines, retries' backoffs, events), so a case that sleeps a year ends at once.

http and lambda steps must be mocked, unless --allow-network.

--replay FILE replays a run exported with cairn run export on the bundle: the
steps whose definition did not change, and whose upstream steps did not either,
answer with their recorded outcomes; the others run.

The exit status is 1 when a case fails. docs/testing.md describes the case format.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return runTests(cmd.Context(), e, stdout, stderr, dir, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.junit, "junit", "", "also write the results as JUnit XML to `FILE`")
	fl.IntVarP(&f.parallel, "parallel", "p", 4, "cases run at once")
	fl.BoolVar(&f.allowNetwork, "allow-network", false, "let http and lambda steps without a mock call their endpoints")
	fl.StringArrayVar(&f.replay, "replay", nil, "replay the run exported to `FILE` (cairn run export); repeatable")
	fl.StringVar(&f.run, "run", "", "run only the cases whose name matches `REGEXP`")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print every case's steps")
	fl.StringArrayVar(&f.with, "with", nil, "deploy the bundle folder `DIR` first (a child workflow the bundle's workflow steps start); repeatable")
	return cmd
}

// testItem is one case to run: from tests/, or a replay with its plan.
type testItem struct {
	c    *testrun.Case
	plan *testrun.ReplayPlan
	err  error // refused before it ran
}

func runTests(ctx context.Context, e env, stdout, stderr io.Writer, dir string, f testFlags) error {
	if f.parallel < 1 {
		return fmt.Errorf("--parallel %d: at least 1", f.parallel)
	}
	var filter *regexp.Regexp
	if f.run != "" {
		var err error
		if filter, err = regexp.Compile(f.run); err != nil {
			return fmt.Errorf("--run: %w", err)
		}
	}
	// Validate the bundle before anything starts.
	if _, err := bundle.LoadDir(ctx, dir, bundle.Limits{}); err != nil {
		return fmt.Errorf("bundle %s: %w", dir, err)
	}
	var cases []*testrun.Case
	if len(f.replay) == 0 {
		var err error
		if cases, err = testrun.LoadCases(dir); err != nil {
			return err
		}
	}
	logger := testLogger(e, stderr)
	began := time.Now()
	env, err := testrun.StartEnv(ctx, testrun.EnvConfig{Logger: logger, Getenv: e})
	if err != nil {
		return err
	}
	defer func() { _ = env.Close(context.WithoutCancel(ctx)) }()
	for _, d := range f.with {
		if _, err := env.Deploy(ctx, d); err != nil {
			return fmt.Errorf("--with: %w", err)
		}
	}
	v, err := env.Deploy(ctx, dir)
	if err != nil {
		return err
	}
	cfg := &testrun.Config{AllowNetwork: f.allowNetwork, Logger: logger}
	if f.allowNetwork {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		lambda, err := newLambdaInvoker(ctx, e, logger)
		if err != nil {
			return err
		}
		cfg.Invokers = map[bundle.Kind]functions.Invoker{
			bundle.KindHTTP: functions.NewHTTP(&functions.HTTPConfig{SigningKey: key, Logger: logger}),
		}
		if lambda != nil {
			cfg.Invokers[bundle.KindLambda] = lambda
		}
	}
	runner, err := testrun.NewRunner(env, v, cfg)
	if err != nil {
		return err
	}
	var items []testItem
	for _, c := range cases {
		if filter == nil || filter.MatchString(c.Name) {
			items = append(items, testItem{c: c})
		}
	}
	for _, path := range f.replay {
		it, err := replayItem(runner, path)
		if err != nil {
			return err
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return fmt.Errorf("no case's name matches --run %q", f.run)
	}
	fmt.Fprintf(stdout, "cairn test: %s version %d (%s), %d cases, %d at a time (embedded catalog ready in %s)\n",
		v.Workflow, v.Version, shortDigest(v.BundleDigest), len(items), f.parallel, time.Since(began).Round(time.Millisecond))

	results := make([]*testrun.Result, len(items))
	sem := make(chan struct{}, f.parallel)
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = runner.Run(ctx, it.c)
		}()
	}
	wg.Wait()

	failed := 0
	for i, res := range results {
		printResult(stdout, items[i], res, f.verbose)
		if !res.Passed() {
			failed++
		}
	}
	if f.junit != "" {
		if err := writeJUnit(f.junit, v.Workflow, results); err != nil {
			return err
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "FAIL: %d passed, %d failed\n", len(results)-failed, failed)
		return &exitError{code: 1, err: fmt.Errorf("%d of %d cases failed", failed, len(results))}
	}
	fmt.Fprintf(stdout, "ok: %d passed\n", len(results))
	return nil
}

// testLogger logs the runtime's warnings (CAIRN_LOG_LEVEL lowers it).
func testLogger(e env, stderr io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if v := e("CAIRN_LOG_LEVEL"); v != "" {
		level, _ = parseLogLevel(v)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// replayItem reads a fixture and turns it into a case for runner's version.
func replayItem(runner *testrun.Runner, path string) (testItem, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return testItem{}, fmt.Errorf("--replay: %w", err)
	}
	var fx testrun.Fixture
	if err := json.Unmarshal(b, &fx); err != nil {
		return testItem{}, fmt.Errorf("--replay %s: not a fixture of cairn run export: %w", path, err)
	}
	c, plan, err := runner.Replay(&fx)
	if err != nil {
		return testItem{}, fmt.Errorf("--replay %s: %w", path, err)
	}
	c.File = path
	return testItem{c: c, plan: plan}, nil
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19] + "…"
	}
	return d
}

// printResult writes one case's outcome for people: PASS or FAIL with its
// name, times, and each failure on a line of its own.
func printResult(w io.Writer, it testItem, res *testrun.Result, verbose bool) {
	state := "PASS"
	if !res.Passed() {
		state = "FAIL"
	}
	fmt.Fprintf(w, "%s  %s  (%s wall, %s virtual)\n", state, res.Case, res.Wall.Round(time.Millisecond), testrun.Duration(res.Virtual.Round(time.Second)))
	if !res.Passed() && res.File != "" {
		fmt.Fprintf(w, "      %s\n", res.File)
	}
	if res.Err != nil {
		for _, line := range strings.Split(res.Err.Error(), "\n") {
			fmt.Fprintf(w, "      case %q: %s\n", res.Case, line)
		}
	}
	for _, f := range res.Failures {
		fmt.Fprintf(w, "      case %q: %s\n", res.Case, f)
	}
	if p := it.plan; p != nil {
		fmt.Fprintf(w, "      reused: %s\n", orNone(p.Reused))
		fmt.Fprintf(w, "      changed: %s; their dependents: %s\n", orNone(p.Changed), orNone(p.Dependents))
		if len(p.Blobs) > 0 {
			fmt.Fprintf(w, "      run again (their recorded outputs are blobs): %s\n", strings.Join(p.Blobs, ", "))
		}
		if len(p.Maps) > 0 {
			fmt.Fprintf(w, "      run again (map steps): %s\n", strings.Join(p.Maps, ", "))
		}
		fmt.Fprintf(w, "      ran their handlers: %s\n", orNone(res.Handlers))
	}
	if (verbose || !res.Passed()) && res.Run != nil {
		fmt.Fprintf(w, "      run %s: %s%s\n", res.Run.ID, res.Run.Status, codeNote(res.Run.ErrorCode))
		for _, s := range res.Run.Steps {
			note := codeNote(s.ErrorCode)
			if s.Reason != "" {
				note += " (" + s.Reason + ")"
			}
			fmt.Fprintf(w, "        %-24s %-10s %d attempts%s\n", s.Key, s.Status, s.Attempts, note)
		}
	}
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func codeNote(code string) string {
	if code == "" {
		return ""
	}
	return " (" + code + ")"
}

// JUnit XML, as CI systems read it (the testsuites/testsuite/testcase form).
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(path, workflow string, results []*testrun.Result) error {
	s := junitSuite{Name: workflow, Tests: len(results)}
	var total time.Duration
	for _, r := range results {
		total += r.Wall
		c := junitCase{Name: r.Case, Classname: workflow, File: r.File, Time: fmt.Sprintf("%.3f", r.Wall.Seconds())}
		switch {
		case r.Err != nil:
			s.Errors++
			c.Error = &junitProblem{Message: r.Err.Error(), Text: r.Err.Error()}
		case len(r.Failures) > 0:
			s.Failures++
			c.Failure = &junitProblem{Message: strings.Join(r.Failures, "; "), Text: strings.Join(r.Failures, "\n")}
		}
		s.Cases = append(s.Cases, c)
	}
	s.Time = fmt.Sprintf("%.3f", total.Seconds())
	b, err := xml.MarshalIndent(junitSuites{Suites: []junitSuite{s}}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644); err != nil {
		return fmt.Errorf("--junit: %w", err)
	}
	return nil
}
