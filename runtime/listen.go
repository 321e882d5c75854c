package runtime

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
)

// Behind a pooler in transaction mode (PgBouncer's pool_mode=transaction) a
// LISTEN runs on whichever server connection the pooler lends for it and is
// forgotten when the connection goes back: the statement succeeds, and no
// notification ever arrives. Nothing fails, the dispatchers just wait for their
// polls. So each time the dispatcher starts listening it sends itself a
// notification through the pool (as every NOTIFY of the catalog is sent) and
// waits for it on its LISTEN connection: when none arrives, it says so once and
// polls tighter (deafPollDivisor) until one does.

const (
	// listenProbes is how many notifications a probe sends before it concludes
	// that none arrive; listenProbeWait is how long it waits for each.
	listenProbes    = 3
	listenProbeWait = 2 * time.Second
	// deafPollDivisor divides PollInterval while notifications do not arrive.
	deafPollDivisor = 4
)

// listenState is what the listen loop knows of its notifications.
type listenState struct {
	// deaf is set while the probe's notifications do not arrive.
	deaf atomic.Bool
	// seq numbers the probes; heard receives the payloads of ChannelProbe.
	seq   atomic.Int64
	heard chan string
}

// pollInterval is how long the claim loop waits without a notification:
// PollInterval, or a quarter of it while notifications do not arrive.
func (d *Dispatcher) pollInterval() time.Duration {
	if d.listen.deaf.Load() {
		return d.cfg.PollInterval / deafPollDivisor
	}
	return d.cfg.PollInterval
}

// listenLoop turns notifications into wake-ups and cancels, and checks that they
// arrive (probeListen). Without a database URL it does nothing: polling and
// heartbeats cover both.
func (d *Dispatcher) listenLoop(ctx context.Context) {
	if d.cfg.DatabaseURL == "" {
		return
	}
	d.listen.heard = make(chan string, listenProbes)
	err := catalog.Listen(ctx, d.cfg.DatabaseURL, func(n catalog.Notification) {
		switch n.Channel {
		case "": // (re)connected: anything may have happened meanwhile
			d.nudge()
			go d.probeListen(ctx)
		case catalog.ChannelSteps:
			d.nudge()
		case catalog.ChannelCancel:
			if id, err := uuid.Parse(n.Payload); err == nil {
				d.cancelRun(id)
			}
		case catalog.ChannelProbe:
			select {
			case d.listen.heard <- n.Payload:
			default:
			}
		}
	}, catalog.ChannelSteps, catalog.ChannelCancel, catalog.ChannelProbe)
	if err != nil {
		d.logger.Warn("cannot listen for notifications; polling only", "error", err)
	}
}

// probeListen sends this dispatcher notifications through the pool until one
// arrives on its LISTEN connection, up to listenProbes, and records whether one
// did (listenState.deaf): the first time none does, it logs a warning.
func (d *Dispatcher) probeListen(ctx context.Context) {
	probe := d.listen.seq.Add(1)
	for i := range listenProbes {
		payload := d.cfg.ID + ":" + strconv.FormatInt(probe, 10) + ":" + strconv.Itoa(i)
		if err := d.store.Notify(ctx, catalog.ChannelProbe, payload); err != nil {
			// The database is away: the listener reconnects, and probes again.
			d.logger.Debug("listen probe not sent", "error", err)
			return
		}
		timeout := time.NewTimer(listenProbeWait)
	wait:
		for {
			select {
			case <-ctx.Done():
				timeout.Stop()
				return
			case <-timeout.C:
				break wait
			case got := <-d.listen.heard:
				if got != payload {
					continue // an earlier probe's, or another dispatcher's
				}
				timeout.Stop()
				if d.listen.deaf.Swap(false) {
					d.logger.Info("notifications arrive again: polling every poll interval", "poll_interval", d.cfg.PollInterval)
				}
				return
			}
		}
	}
	if !d.listen.deaf.Swap(true) {
		d.logger.Warn("notifications sent through the database URL do not arrive on this server's LISTEN connection: "+
			"the URL goes through a pooler in transaction mode (PgBouncer pool_mode=transaction), where LISTEN does not hold; "+
			"set CAIRN_DATABASE_LISTEN_URL to a direct connection to PostgreSQL. Polling tighter meanwhile",
			"poll_interval", d.pollInterval())
	}
}
