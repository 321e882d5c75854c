package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/secrets"
)

// attempt is one running attempt of a claimed step.
type attempt struct {
	claim catalog.Claimed
	start time.Time
	// claimStart is when the claim that leased this step was asked for (its span).
	claimStart time.Time
	// span is the attempt's span; nil without Config.Tracer.
	span   trace.Span
	cancel context.CancelCauseFunc
	// done is closed when the attempt's context ends (lease lost, run canceled,
	// timeout, shutdown).
	done <-chan struct{}
	// base is the dispatcher's logger; log is base with the attempt's names,
	// made at its first use (most attempts log nothing: slog's With formats its
	// attributes at once, 8 % of a dispatcher's CPU when made for each).
	base    *slog.Logger
	logOnce sync.Once
	log     *slog.Logger
	// reporting is set before the attempt's outcome is written: from then on the
	// catalog's answer to that write says whether the lease was lost.
	reporting atomic.Bool
	// followed is set when the finish that wrote the outcome also leased steps
	// and had room left (completeLoop): nothing it made ready waits, and the slot
	// the attempt gives back needs no look from the claim loop.
	followed bool
	// slotGiven: the attempt gave its slot back once its handler returned, and
	// holds a finishing token instead (finishEarly).
	slotGiven bool
}

// logger is the dispatcher's logger with the attempt's run, step, number and
// lease token.
func (a *attempt) logger() *slog.Logger {
	a.logOnce.Do(func() {
		c := a.claim
		a.log = a.base.With("run_id", c.RunID, "step", c.Key, "attempt", c.Attempt, "lease_token", c.LeaseToken)
	})
	return a.log
}

// debug logs at debug level, when that level is on.
func (a *attempt) debug(msg string, args ...any) {
	if a.base.Enabled(context.Background(), slog.LevelDebug) {
		a.logger().Debug(msg, args...)
	}
}

// ending reports whether the attempt is ending on its own: its outcome is being
// recorded, or its context ended.
func (a *attempt) ending() bool {
	if a.reporting.Load() {
		return true
	}
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func (a *attempt) lease() catalog.Lease {
	return catalog.Lease{RunID: a.claim.RunID, Key: a.claim.Key, Token: a.claim.LeaseToken}
}

func (d *Dispatcher) startAttempt(c catalog.Claimed, claimStart time.Time) {
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &attempt{
		claim:      c,
		start:      time.Now(),
		claimStart: claimStart,
		cancel:     cancel,
		done:       ctx.Done(),
		base:       d.logger,
	}
	d.mu.Lock()
	d.active[c.LeaseToken] = a
	d.mu.Unlock()
	d.life.work.Add(1)
	d.metrics.running.Inc()
	d.metrics.queueWait.WithLabelValues(c.Workflow).Observe(c.QueueWait)
	go func() {
		defer func() {
			d.mu.Lock()
			delete(d.active, c.LeaseToken)
			d.mu.Unlock()
			cancel(nil)
			d.metrics.running.Dec()
			if a.slotGiven {
				<-d.finishing
			} else {
				d.slots <- struct{}{}
			}
			d.life.work.Done()
			if !a.followed {
				d.nudge()
			}
		}()
		d.runAttempt(ctx, a)
	}()
}

// loadVersion returns the compiled version of a's run. While the database is
// unavailable it tries again (backing off from 100 ms to 2 s) for as long as the
// attempt holds its lease: an outage must not fail the attempt, and the lease is
// kept through it (heartbeats resume, sweepers wait; docs/operations.md). It
// returns an error when the attempt's context ends (lease lost, run canceled,
// shutdown) or the database refuses for another reason.
func (d *Dispatcher) loadVersion(ctx context.Context, a *attempt) (*compiledVersion, error) {
	wait := 100 * time.Millisecond
	for {
		ver, err := d.versions.get(ctx, a.claim.Workflow, a.claim.Version)
		// A load that ran out of its own time (definitionLoadTimeout) met a
		// database that did not answer: unavailable too.
		unavailable := errors.Is(err, catalog.ErrUnavailable) || (errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil)
		if err == nil || !unavailable {
			return ver, err
		}
		a.debug("definition not loaded: the database is unavailable; trying again", "error", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// observeStart records how long attempt a took from its claim to its handler's
// start, for the admission of later claims (admission.go).
func (d *Dispatcher) observeStart(a *attempt) {
	latency := time.Since(a.start)
	d.metrics.startLatency.Observe(latency.Seconds())
	d.metrics.admissionLimit.Set(float64(d.admit.observe(latency)))
}

// outcome is what an attempt reports to the catalog.
type outcome struct {
	status    catalog.Outcome
	output    json.RawMessage
	err       *functions.Error
	retryable bool
	retryIn   time.Duration
	logKey    string
}

// runAttempt runs the handler and reports its outcome. ctx ends with a cause when the
// attempt must stop early (lease lost, run canceled, shutdown).
func (d *Dispatcher) runAttempt(ctx context.Context, a *attempt) {
	c := a.claim
	start := time.Now()
	if d.cfg.Tracer != nil {
		ctx = d.traceAttempt(ctx, a)
		defer a.span.End()
	}
	ver, err := d.loadVersion(ctx, a)
	if err != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errLeaseLost) || errors.Is(cause, errRunCanceled):
			a.logger().Info("attempt abandoned", "reason", cause)
		case errors.Is(cause, errShutdown):
			d.report(a, outcome{status: catalog.OutcomeHandback, err: &functions.Error{Message: "handed back at dispatcher shutdown", Retryable: true, Code: "shutdown"}}, nil)
		default:
			a.logger().Error("load definition", "error", err)
			d.report(a, infraOutcome(a, "load the definition", err), nil)
		}
		return
	}
	key := c.Key
	if c.MapIndex != nil {
		key, _, _ = bundle.SplitInstanceKey(c.Key) // a map instance runs its map step's function
	}
	step := ver.steps[key]
	if step == nil {
		d.report(a, outcome{status: catalog.OutcomeFailed, err: functions.Terminalf("step %q is not in version %d of %s", c.Key, c.Version, c.Workflow)}, nil)
		return
	}
	if step.Kind.Waits() {
		d.suspend(ctx, a, step)
		return
	}
	if step.Map != nil && c.MapIndex == nil {
		d.startMap(ctx, a, step)
		return
	}
	if step.Kind == bundle.KindWorkflow {
		d.startChild(ctx, a, step)
		return
	}
	invoker := d.cfg.Handlers.Invokers[step.Kind]
	if invoker == nil {
		// Counted, so bounded by the retry policy: another dispatcher may have it.
		d.report(a, outcome{status: catalog.OutcomeFailed, retryable: true, err: &functions.Error{
			Message:   fmt.Sprintf("dispatcher %s cannot run %s steps: none is configured", d.cfg.ID, step.Kind),
			Retryable: true, Code: functions.CodeKindUnavailable}}, step)
		return
	}

	sink := newAttemptSink(ctx, d, a)
	defer sink.cleanup()
	// The cache entries the attempt uses (its bundle, its inputs' files) are not
	// evicted before it ends.
	use := d.cache.newUse()
	defer use.release()
	inv, err := d.invocation(ctx, c, ver, step, use)
	if err != nil {
		var fe *functions.Error
		if errors.As(err, &fe) {
			d.report(a, outcome{status: catalog.OutcomeFailed, retryable: fe.Retryable, err: fe, logKey: sink.storeLog()}, step)
			return
		}
		a.logger().Warn("prepare attempt", "error", err)
		d.report(a, infraOutcome(a, "prepare the attempt", err), step)
		return
	}

	// Secret values never reach the output, the log, checkpoints, progress or the
	// error: they are masked on the way.
	masker := functions.NewMasker(inv.Secrets)
	masked := functions.NewMaskSink(sink, masker)
	runCtx, cancelTimeout := context.WithTimeoutCause(ctx, step.Timeout.Std(), errTimeout)
	var invokeSpan trace.Span
	if d.cfg.Tracer != nil {
		runCtx, invokeSpan = d.cfg.Tracer.Start(runCtx, "invoke", trace.WithAttributes(attribute.String("cairn.kind", string(step.Kind))))
		inv.Envelope.Traceparent = tracing.Traceparent(runCtx)
	}
	if step.Kind == bundle.KindExec {
		inv.Started = func() { d.observeStart(a) }
	} else {
		d.observeStart(a)
	}
	kind := string(step.Kind)
	invokeStart := time.Now()
	d.metrics.attemptPhase.WithLabelValues(kind, phasePrepare).Observe(invokeStart.Sub(a.start).Seconds())
	invErr := invoker.Invoke(runCtx, inv, masked)
	storeStart := time.Now()
	d.metrics.attemptPhase.WithLabelValues(kind, phaseInvoke).Observe(storeStart.Sub(invokeStart).Seconds())
	cancelTimeout()
	if ferr := masked.Flush(); ferr != nil && invErr == nil {
		invErr = ferr
	}
	sink.endProgress() // the newest progress report is recorded before the outcome
	if invokeSpan != nil {
		endSpan(invokeSpan, invErr)
	}
	if fe := (*functions.Error)(nil); masker != nil && errors.As(invErr, &fe) {
		fe.Message = masker.String(fe.Message)
	}
	cause := context.Cause(runCtx)

	var out outcome
	switch {
	case errors.Is(cause, errLeaseLost) || errors.Is(cause, errRunCanceled) || errors.Is(invErr, functions.ErrLeaseLost):
		// Someone else owns the step now (or nobody: the run is canceled). Nothing
		// of ours may be written.
		sink.output.abort(cause)
		a.logger().Info("attempt abandoned", "reason", context.Cause(ctx))
		d.metrics.attempts.WithLabelValues("abandoned").Inc()
		d.metrics.attemptDuration.WithLabelValues(c.Workflow, "abandoned").Observe(time.Since(a.start).Seconds())
		return
	case errors.Is(cause, errShutdown):
		sink.output.abort(cause)
		out = outcome{status: catalog.OutcomeHandback, err: &functions.Error{Message: "handed back at dispatcher shutdown", Retryable: true, Code: "shutdown"}}
	case errors.Is(cause, errTimeout):
		sink.output.abort(cause)
		out = outcome{status: catalog.OutcomeTimedOut, retryable: true,
			err: &functions.Error{Message: fmt.Sprintf("timed out after %s", step.Timeout.Std()), Retryable: true, Code: "timeout"}}
	case invErr == nil:
		var storeSpan trace.Span
		if d.cfg.Tracer != nil {
			_, storeSpan = d.cfg.Tracer.Start(ctx, "store output")
		}
		value, err := sink.output.finish()
		if storeSpan != nil {
			endSpan(storeSpan, err)
		}
		if err != nil {
			a.logger().Warn("store output", "error", err)
			out = infraOutcome(a, "store the output", err)
		} else if failed, suspended := d.suspendOutcome(a, start, value, sink.storeLog); suspended {
			return
		} else if failed != nil {
			out = *failed
		} else {
			out = outcome{status: catalog.OutcomeSucceeded, output: value}
		}
	default:
		sink.output.abort(invErr)
		var fe *functions.Error
		if !errors.As(invErr, &fe) {
			// Not the handler's failure but Cairn's (the blob store refusing the
			// output as it streams, a pipe, a fork): like the other infrastructure
			// failures, it must not use up the step's attempts.
			a.logger().Warn("invoke", "error", invErr)
			out = infraOutcome(a, "invoke", invErr)
			break
		}
		out = outcome{status: catalog.OutcomeFailed, retryable: fe.Retryable, err: fe, retryIn: fe.RetryAfter}
	}
	out.logKey = sink.storeLog()
	a.debug("attempt finished", "outcome", out.status, "duration", time.Since(start))
	recordStart := time.Now()
	d.metrics.attemptPhase.WithLabelValues(kind, phaseStore).Observe(recordStart.Sub(storeStart).Seconds())
	d.report(a, out, step)
	d.metrics.attemptPhase.WithLabelValues(kind, phaseRecord).Observe(time.Since(recordStart).Seconds())
}

// infraOutcome reports a failure of Cairn's infrastructure: it does not use up the
// step's attempts, and retries back off exponentially (1s, 2s, 4s, … up to a minute).
func infraOutcome(a *attempt, what string, err error) outcome {
	n := min(a.claim.Attempt, 7)
	return outcome{status: catalog.OutcomeInfraFailed, retryable: true, err: infraError(what, err),
		retryIn: time.Duration(1<<(n-1)) * time.Second}
}

// infraError is a retryable failure of Cairn's own infrastructure (not the handler).
// Its message goes to viewers (last_error, attempts): the server's file paths are
// taken out of it; the dispatcher's log has the whole error.
func infraError(what string, err error) *functions.Error {
	msg := serverPath.ReplaceAllString(fmt.Sprintf("cairn could not %s: %v", what, err), "${1}<path>")
	return &functions.Error{Message: msg, Retryable: true, Code: "infrastructure"}
}

// serverPath matches an absolute file path at the start of a word (so not the path
// of a URL), without the punctuation that follows it.
var serverPath = regexp.MustCompile(`(^|[\s"'(=])/[^\s"'()]*[^\s"'():,;.]`)

// report commits an outcome, fenced by the lease; transient database errors are
// retried (untilWritten). An outcome whose value the catalog refuses (an output
// with \u0000) fails the step instead, for good (refusedOutcome).
func (d *Dispatcher) report(a *attempt, out outcome, step *bundle.StepDefinition) {
	p := &catalog.StepFinishParams{
		RunID: a.claim.RunID, Key: a.claim.Key, LeaseToken: a.claim.LeaseToken,
		Outcome: out.status, Output: out.output, Retryable: out.retryable, LogKey: out.logKey,
	}
	if out.err != nil {
		out.err.Message = storableMessage(out.err.Message)
		p.Error, _ = json.Marshal(out.err)
	}
	switch {
	case out.status == catalog.OutcomeInfraFailed:
		p.RetryIn = out.retryIn
	case out.status != catalog.OutcomeSucceeded && out.status != catalog.OutcomeHandback && out.retryable && step != nil:
		delay := retryDelay(step.Retry, a.claim.Attempt, jitterRand())
		p.RetryIn = max(delay, out.retryIn)
	}
	a.reporting.Store(true)
	d.finishEarly(a)
	mapWorked := false
	err := d.untilWritten(a, "finish", "record the outcome", nil, func() (err error) {
		a.followed, mapWorked, err = d.finish(p)
		return err
	})
	if errors.Is(err, catalog.ErrInvalidInput) && (out.err == nil || out.err.Code != CodeInvalidOutput) {
		value := "error"
		if out.status == catalog.OutcomeSucceeded {
			value = "output"
		}
		refused := refusedOutcome(value, err)
		refused.logKey = out.logKey
		d.report(a, refused, step)
		return
	}
	if err != nil {
		return
	}
	d.metrics.attempts.WithLabelValues(string(out.status)).Inc()
	if a.claim.MapIndex != nil && !mapWorked {
		d.mapNudgeInstance(a.claim.RunID, a.claim.Key) // room for the map's next instances
	}
	d.metrics.attemptDuration.WithLabelValues(a.claim.Workflow, string(out.status)).Observe(time.Since(a.start).Seconds())
	if a.span != nil {
		d.traceEnd(a, out)
	}
	if p.RetryIn > 0 {
		d.scheduleWake(time.Now().Add(p.RetryIn))
	}
}

// invocation builds the envelope and spec of an attempt: deps and checkpoint in the
// form the kind needs ($blob references become local files for exec and presigned
// URLs for http and lambda).
func (d *Dispatcher) invocation(ctx context.Context, c catalog.Claimed, ver *compiledVersion, step *bundle.StepDefinition, use *cacheUse) (*functions.Invocation, error) {
	var deps map[string]json.RawMessage
	if len(c.Deps) > 0 {
		if err := json.Unmarshal(c.Deps, &deps); err != nil {
			return nil, fmt.Errorf("decode deps: %w", err)
		}
	}
	for k, v := range deps {
		nv, err := d.resolvePayload(ctx, v, step.Kind, use)
		var fe *functions.Error
		if errors.As(err, &fe) {
			fe.Message = fmt.Sprintf("input from %s: %s", k, fe.Message)
		}
		if err != nil {
			return nil, fmt.Errorf("input from %s: %w", k, err)
		}
		deps[k] = nv
	}
	if deps == nil {
		deps = map[string]json.RawMessage{}
	}
	checkpoint := json.RawMessage("null")
	if len(c.Checkpoint) > 0 {
		cp, err := d.resolvePayload(ctx, json.RawMessage(c.Checkpoint), step.Kind, use)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		checkpoint = cp
	}
	params, err := json.Marshal(step.With)
	if err != nil {
		return nil, fmt.Errorf("encode params: %w", err)
	}
	input := json.RawMessage(c.Input)
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	inv := &functions.Invocation{
		Envelope: functions.Envelope{
			RunID: c.RunID.String(), Workflow: c.Workflow, Version: c.Version, Step: c.Key,
			Attempt: c.Attempt, Input: input, Params: params, Deps: deps, Checkpoint: checkpoint,
			Item: json.RawMessage(c.MapItem), Index: c.MapIndex,
		},
		Timeout: step.Timeout.Std(),
	}
	if ver.handlers[c.Key] {
		failure, err := d.store.RunFailure(ctx, c.RunID)
		if err != nil {
			return nil, err
		}
		inv.Envelope.Failure = failure
	}
	switch step.Kind {
	case bundle.KindExec:
		dir, err := d.cache.bundleDir(ctx, ver.digest, use)
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			// This server's cache cannot take it, and retrying here will not
			// change that: a counted failure, bounded by the retry policy, that
			// does not show server paths to viewers (the log has them).
			d.logger.Error("cannot install a bundle in the cache directory", "cache_dir", d.cfg.Handlers.CacheDir, "error", err)
			reason := "permission denied"
			var errno syscall.Errno
			if errors.As(err, &errno) {
				reason = errno.Error()
			}
			return nil, &functions.Error{Message: fmt.Sprintf("dispatcher %s cannot install the bundle in its cache directory (%s); see its log and /readyz",
				d.cfg.ID, reason), Retryable: true, Code: functions.CodeBundleInstall}
		}
		if err != nil {
			return nil, err
		}
		inv.BundleDir = dir
		inv.Spec.Exec = append([]string{"./" + step.Exec.Path}, step.Exec.Args...)
		inv.Spec.NoNetwork = step.Network == bundle.NetworkNone
		if inv.Spec.AllowPorts, err = bundle.AllowedPorts(step.NetworkAllow); err != nil {
			return nil, &functions.Error{Message: "network allow: " + err.Error(), Code: functions.CodeInvalidSpec}
		}
		if r := step.Resources; r != nil {
			inv.Spec.Resources = &functions.Resources{MemoryBytes: r.MemoryBytes, CPU: r.CPU, Pids: r.Pids}
		}
		for _, name := range slices.Sorted(maps.Keys(step.Env)) {
			v, err := d.resolveValue(ctx, inv, step.Env[name])
			if err != nil {
				return nil, err
			}
			inv.Spec.Env = append(inv.Spec.Env, name+"="+v)
		}
		d.addCallbackURL(inv, c)
	case bundle.KindHTTP:
		inv.Spec.HTTP = &functions.HTTPSpec{URL: step.HTTP.URL}
		if len(step.HTTP.Headers) > 0 {
			inv.Spec.HTTP.Headers = make(map[string]string, len(step.HTTP.Headers))
		}
		for name, hv := range step.HTTP.Headers {
			v, err := d.resolveValue(ctx, inv, hv)
			if err != nil {
				return nil, err
			}
			inv.Spec.HTTP.Headers[name] = v
		}
		d.addCheckpointCredential(inv, c)
		d.addCallbackURL(inv, c)
	case bundle.KindLambda:
		inv.Spec.Lambda = &functions.LambdaSpec{Function: step.Lambda.Function, Qualifier: step.Lambda.Qualifier}
		d.addCheckpointCredential(inv, c)
		d.addCallbackURL(inv, c)
	case bundle.KindBuiltin:
		inv.Spec.Builtin = step.Builtin
	}
	return inv, nil
}

// resolveValue returns a plain value, or the newest value of the secret v
// references (remembered in inv.Secrets for masking). A secret that is missing or
// cannot be opened is a terminal failure, code secret_not_found, whose message
// names the secret and never holds a value.
func (d *Dispatcher) resolveValue(ctx context.Context, inv *functions.Invocation, v bundle.Value) (string, error) {
	if !v.IsSecret() {
		return v.Plain, nil
	}
	notFound := func(why string) error {
		return &functions.Error{Message: fmt.Sprintf("secret %q %s", v.Secret, why), Code: functions.CodeSecretNotFound}
	}
	if d.cfg.Handlers.Secrets == nil {
		return "", notFound("cannot be read: this server has no secret store configured")
	}
	value, _, err := d.cfg.Handlers.Secrets.Reveal(ctx, v.Secret)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return "", notFound("does not exist: set it with `cairn secret set " + v.Secret + "`")
	case errors.Is(err, secrets.ErrNoKey):
		return "", notFound("cannot be read: this server has no CAIRN_SECRET_KEY")
	case errors.Is(err, secrets.ErrUnknownKey), errors.Is(err, secrets.ErrDecrypt):
		return "", notFound("cannot be opened with this server's keys (CAIRN_SECRET_KEY, CAIRN_SECRET_KEYS_OLD)")
	case err != nil:
		return "", fmt.Errorf("reveal secret %s: %w", v.Secret, err)
	}
	inv.Secrets = append(inv.Secrets, string(value))
	return string(value), nil
}

// addCheckpointCredential lets a remote handler PUT checkpoints: the signed lease
// credential and where to send it.
func (d *Dispatcher) addCheckpointCredential(inv *functions.Invocation, c catalog.Claimed) {
	if len(d.cfg.Handlers.SigningKey) == 0 {
		return
	}
	inv.Envelope.LeaseToken = functions.LeaseCredential(d.cfg.Handlers.SigningKey, c.RunID.String(), c.Key, c.LeaseToken)
	inv.Secrets = append(inv.Secrets, inv.Envelope.LeaseToken) // a credential: masked like a secret
	if d.cfg.Handlers.PublicURL != "" {
		inv.Envelope.CheckpointURL = strings.TrimRight(d.cfg.Handlers.PublicURL, "/") + "/v1/runs/" + c.RunID.String() + "/steps/" + url.PathEscape(c.Key) + "/checkpoint"
	}
}

// resolvePayload turns a stored $blob reference into what a handler of kind can read.
// A reference to an object the blob store does not have fails the step
// (blob_missing): retrying cannot bring the object back.
func (d *Dispatcher) resolvePayload(ctx context.Context, v json.RawMessage, kind bundle.Kind, use *cacheUse) (json.RawMessage, error) {
	ref, ok := blobstore.ParseRef(v)
	if !ok {
		return v, nil
	}
	key, err := ref.Key()
	if err != nil {
		return nil, &functions.Error{Message: fmt.Sprintf("malformed $blob reference: %v", err), Code: functions.CodeBlobMissing}
	}
	switch kind {
	case bundle.KindExec:
		path, err := d.cache.blobFile(ctx, ref, use)
		if errors.Is(err, blobstore.ErrNotFound) {
			return nil, &functions.Error{Message: fmt.Sprintf("the blob %s is not in the blob store", ref.Digest), Code: functions.CodeBlobMissing}
		}
		if err != nil {
			return nil, err
		}
		ref.Path = path
	case bundle.KindHTTP, bundle.KindLambda:
		url, err := d.blobs.PresignGet(ctx, key, d.cfg.Handlers.PresignExpiry)
		if err == nil {
			ref.URL = url
		}
		// A backend without presigned URLs (the file store of `cairn dev`) leaves the
		// reference without a URL: such handlers read it through the API.
	}
	return ref.JSON(), nil
}

// finishEarly gives the attempt's slot back once its handler has returned, for
// a finishing token: the outcome's commit (a group commit, completeLoop) then
// holds no slot, so the dispatcher starts other handlers meanwhile, and more
// outcomes share each commit. Without a free finishing token the attempt keeps
// its slot.
func (d *Dispatcher) finishEarly(a *attempt) {
	if a.slotGiven {
		return // a report that reports again (a refused value)
	}
	select {
	case d.finishing <- struct{}{}:
		a.slotGiven = true
		d.slots <- struct{}{}
	default:
	}
}
