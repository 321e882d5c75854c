package runtime

import (
	"strings"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// Callbacks (docs/functions.md, "Completing later"): every exec, http and lambda
// attempt gets a callback_url in its envelope. A function that started work outside
// Cairn answers {"$suspend": {"timeout": …}}: its attempt ends, and the step is
// suspended (wait_kind callback) until POST /v1/callbacks/<token> completes it or
// the timeout passes.

// addCallbackURL puts the attempt's callback URL in its envelope (none without a
// signing key or a public URL). Its token is the credential that completes the
// step: it is masked like a secret in what the attempt produces (a handler that
// logs its envelope would otherwise hand it to every viewer).
func (d *Dispatcher) addCallbackURL(inv *functions.Invocation, c catalog.Claimed) {
	if len(d.cfg.Handlers.SigningKey) == 0 || d.cfg.Handlers.PublicURL == "" {
		return
	}
	token := functions.CallbackToken(d.cfg.Handlers.SigningKey, c.RunID.String(), c.Key, c.Attempt)
	inv.Envelope.CallbackURL = strings.TrimRight(d.cfg.Handlers.PublicURL, "/") + "/v1/callbacks/" + token
	inv.Secrets = append(inv.Secrets, token)
}

// suspendOutcome reads a successful attempt's output: when it is a $suspend, the
// step is suspended for its callback and suspended is true; a malformed $suspend
// (or one from an attempt that was given no callback URL) is a terminal failure.
//
// storeLog keeps the attempt's log (on its attempt) when the step suspends.
func (d *Dispatcher) suspendOutcome(a *attempt, start time.Time, output []byte, storeLog func() string) (failed *outcome, suspended bool) {
	sp, ok, err := functions.ParseSuspend(output)
	switch {
	case !ok:
		return nil, false
	case err != nil:
		return &outcome{status: catalog.OutcomeFailed, err: &functions.Error{Message: err.Error(), Code: functions.CodeProtocol}}, false
	case len(d.cfg.Handlers.SigningKey) == 0 || d.cfg.Handlers.PublicURL == "":
		return &outcome{status: catalog.OutcomeFailed, err: &functions.Error{
			Message: "the function answered $suspend, but this dispatcher gives no callback_url: callbacks need a signing key (CAIRN_SIGNING_KEY) and a public URL (CAIRN_PUBLIC_URL)",
			Code:    functions.CodeProtocol}}, false
	}
	c := a.claim
	w := catalog.Wait{Kind: catalog.WaitCallback, OnTimeout: catalog.OnTimeout(sp.OnTimeout)}
	if sp.Timeout > 0 {
		// By the database's clock, as a sleep: the claim's lease expiry less its TTL.
		w.TimeoutAt = c.LeaseExpiresAt.Add(-d.cfg.LeaseTTL).Add(time.Since(start)).Add(sp.Timeout)
	}
	w.LogKey = storeLog()
	a.reporting.Store(true)
	if d.suspendWritten(a, "suspend for a callback", "$suspend", nil, func() error { return d.store.StepSuspend(d.life.abandonCtx, a.lease(), w) }) != nil {
		return nil, true
	}
	d.metrics.attempts.WithLabelValues("suspended").Inc()
	if !w.TimeoutAt.IsZero() {
		d.wakeAt(w.TimeoutAt)
	}
	return nil, true
}
