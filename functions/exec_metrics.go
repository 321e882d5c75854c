package functions

import (
	"os"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Phases of an exec attempt, the values of cairn_exec_phase_seconds' phase
// label. Their sum is Invoke's whole time.
const (
	// PhasePrepare: the program resolved, the envelope encoded, the attempt's
	// directory made (and its tmpfs mounted), the command line and its limits.
	PhasePrepare = "prepare"
	// PhaseSpawn: the pipes made and the process started (fork and exec of
	// bwrap, or of the handler unsandboxed).
	PhaseSpawn = "spawn"
	// PhaseNetwork: the sandbox's network connected (pasta, or a pooled
	// namespace handed over), until bwrap is let go on to the handler. Absent
	// for network: none and unsandboxed attempts.
	PhaseNetwork = "network"
	// PhaseRun: from the process's start (or the network's release) to its
	// exit: bwrap's own setup (mounts, setpriv) and the handler.
	PhaseRun = "run"
	// PhaseDrain: from the exit until the pipes are read to their end and the
	// process is reaped.
	PhaseDrain = "drain"
	// PhaseCleanup: the attempt's directory, tmpfs, cgroup and network let go.
	PhaseCleanup = "cleanup"
)

// execPhases lists the phases in the order an attempt goes through them.
var execPhases = []string{PhasePrepare, PhaseSpawn, PhaseNetwork, PhaseRun, PhaseDrain, PhaseCleanup}

// Processes whose processor time cairn_exec_cpu_seconds_total counts, its
// process label.
const (
	// CPUHandler is the attempt's process as the server reaps it: the
	// handler and its reaped children, with prlimit before it, unsandboxed;
	// bwrap's own processes, sandboxed. A sandboxed handler's processes are
	// not counted: they end inside the sandbox's PID namespace, and bwrap
	// does not pass their time on to its own.
	CPUHandler = "handler"
	// CPUNetwork is what connected the sandbox's network: pasta (for the whole
	// life of its namespace) and the route setup (nsenter, ip).
	CPUNetwork = "network"
)

// execMetrics are the exec invoker's Prometheus series: where the wall time
// of an attempt goes, by phase, and the processor time of the processes it
// starts. Observing is a few atomic adds: cheap beside a fork.
type execMetrics struct {
	phaseVec *prometheus.HistogramVec
	cpuVec   *prometheus.CounterVec
	// phases and cpu are the series of each label value, resolved once.
	phases map[string]prometheus.Observer
	cpu    map[string]prometheus.Counter
}

// execPhaseBuckets span a fraction of a millisecond (a pipe drained) to a
// long handler.
var execPhaseBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 5, 30, 300}

func newExecMetrics() *execMetrics {
	m := &execMetrics{
		phaseVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cairn_exec_phase_seconds",
			Help:    "Wall time of the phases of exec attempts on this server (prepare, spawn, network, run, drain, cleanup; functions/exec_metrics.go).",
			Buckets: execPhaseBuckets,
		}, []string{"phase"}),
		cpuVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_exec_cpu_seconds_total",
			Help: "Processor time (user and system) of the processes exec attempts started: handler (the handler, or bwrap alone when sandboxed: its PID namespace does not pass its processes' time on) and network (pasta, nsenter, ip).",
		}, []string{"process"}),
		phases: map[string]prometheus.Observer{},
		cpu:    map[string]prometheus.Counter{},
	}
	for _, p := range execPhases {
		m.phases[p] = m.phaseVec.WithLabelValues(p)
	}
	for _, p := range []string{CPUHandler, CPUNetwork} {
		m.cpu[p] = m.cpuVec.WithLabelValues(p)
	}
	return m
}

// Describe and Collect make an Exec a prometheus.Collector of its series; the
// dispatcher registers it.
func (e *Exec) Describe(ch chan<- *prometheus.Desc) {
	e.metrics.phaseVec.Describe(ch)
	e.metrics.cpuVec.Describe(ch)
}

// Collect implements prometheus.Collector.
func (e *Exec) Collect(ch chan<- prometheus.Metric) {
	e.metrics.phaseVec.Collect(ch)
	e.metrics.cpuVec.Collect(ch)
}

// addCPU counts the processor time of an ended process (and of the children
// it reaped).
func (m *execMetrics) addCPU(process string, ps *os.ProcessState) {
	if ps == nil {
		return
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return
	}
	d := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	m.cpu[process].Add(d.Seconds())
}

// phaseClock times the phases of one attempt: each lap observes the time since
// the previous one under a phase.
type phaseClock struct {
	m    *execMetrics
	last time.Time
}

func (m *execMetrics) clock() *phaseClock { return &phaseClock{m: m, last: time.Now()} }

// lap ends phase now.
func (c *phaseClock) lap(phase string) {
	now := time.Now()
	c.m.phases[phase].Observe(now.Sub(c.last).Seconds())
	c.last = now
}
