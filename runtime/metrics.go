package runtime

import "github.com/prometheus/client_golang/prometheus"

// metrics are the dispatcher's Prometheus series.
type metrics struct {
	claimed   prometheus.Counter
	attempts  *prometheus.CounterVec
	leaseLost *prometheus.CounterVec
	swept     prometheus.Counter
	woken     prometheus.Counter
	// decided counts the conditions (when) this dispatcher decided.
	decided prometheus.Counter
	running prometheus.Gauge
	// mapInstances counts the map instances this dispatcher's map loop created.
	mapInstances prometheus.Counter
	// queueWait is how long claimed steps had been ready (ready → started), by workflow.
	queueWait *prometheus.HistogramVec
	// attemptDuration is how long attempts took (claim → outcome recorded), by
	// workflow and outcome.
	attemptDuration *prometheus.HistogramVec
	// heartbeatFailed counts lease renewals that failed (the database did not
	// answer within a lease TTL, or refused).
	heartbeatFailed prometheus.Counter
	// heartbeat is how long lease renewals took (those that answered).
	heartbeat prometheus.Histogram
	// startLatency is how long claimed attempts took to start their handler
	// (claim → handler started); admissionLimit is how many attempts the
	// dispatcher lets run at once now (admission.go).
	startLatency   prometheus.Histogram
	admissionLimit prometheus.Gauge
	// eventsTaken counts the wait_for_event steps that took a buffered event when
	// they began to wait (docs/events.md).
	eventsTaken prometheus.Counter
	// attemptPhase is where the dispatcher's time of an attempt goes, by kind:
	// prepare (claim → invoke: definition, bundle, inputs), invoke, store (the
	// output and the log), record (the outcome written).
	attemptPhase *prometheus.HistogramVec
}

// Phases of attemptPhase.
const (
	phasePrepare = "prepare"
	phaseInvoke  = "invoke"
	phaseStore   = "store"
	phaseRecord  = "record"
)

// attemptPhaseBuckets span a fraction of a millisecond to a long handler.
var attemptPhaseBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 5, 30, 300}

// durationBuckets spans a builtin's milliseconds to a long batch job's hour.
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_steps_claimed_total", Help: "Steps claimed by this dispatcher.",
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_attempts_total", Help: "Attempts finished by this dispatcher, by outcome.",
		}, []string{"outcome"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_lease_lost_total", Help: "Writes rejected because the lease was no longer current (fencing), by operation.",
		}, []string{"op"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_leases_swept_total", Help: "Expired leases returned to ready or failed by this dispatcher's sweeper.",
		}),
		woken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_waits_woken_total", Help: "Suspended steps woken by this dispatcher's wake sweeper (sleeps ended, timeouts applied).",
		}),
		decided: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_conditions_decided_total", Help: "Step conditions (when) decided by this dispatcher.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cairn_attempts_running", Help: "Attempts running in this dispatcher.",
		}),
		mapInstances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_map_instances_created_total", Help: "Map instances created by this dispatcher's map loop.",
		}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cairn_queue_wait_seconds", Help: "Time steps claimed by this dispatcher had been ready (ready → started), by workflow.",
			Buckets: durationBuckets,
		}, []string{"workflow"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cairn_attempt_duration_seconds", Help: "Duration of the attempts this dispatcher ran (claim → outcome recorded), by workflow and outcome.",
			Buckets: durationBuckets,
		}, []string{"workflow", "outcome"}),
		heartbeatFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_heartbeats_failed_total", Help: "Lease renewals of this dispatcher that failed (retried until the leases expire).",
		}),
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cairn_heartbeat_seconds", Help: "Duration of this dispatcher's lease renewals (its liveness and every lease it holds, one statement).",
			Buckets: durationBuckets,
		}),
		startLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cairn_attempt_start_seconds", Help: "Time from the claim of a step to the start of its handler, on this dispatcher.",
			Buckets: durationBuckets,
		}),
		admissionLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cairn_admission_limit", Help: "How many attempts this dispatcher lets run at once now: its concurrency, lowered while handlers start slowly (overload).",
		}),
		eventsTaken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_event_waits_taken_total", Help: "wait_for_event steps claimed by this dispatcher that took a matching event received before they began to wait (buffered) and succeeded at once.",
		}),
		attemptPhase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cairn_attempt_phase_seconds", Help: "Where the time of this dispatcher's attempts goes, by kind and phase: prepare (claim → invoke: definition, bundle, inputs), invoke, store (output and log), record (outcome written).",
			Buckets: attemptPhaseBuckets,
		}, []string{"kind", "phase"}),
	}
	if reg != nil {
		reg.MustRegister(m.attemptPhase, m.claimed, m.attempts, m.leaseLost, m.swept, m.woken, m.decided, m.running,
			m.mapInstances, m.queueWait, m.attemptDuration, m.heartbeatFailed, m.heartbeat, m.startLatency, m.admissionLimit, m.eventsTaken)
	}
	return m
}
