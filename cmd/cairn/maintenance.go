package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime"
)

// newMaintenance returns the housekeeping services a server runs beside its
// dispatcher disp (package maintenance): the registry of live dispatchers, the
// schedule firer, the event flow firer, the bulk operation worker, the reaper, the blob collector (unless
// --gc-interval is 0, or the blob store cannot be listed) and the span exporter.
// They act under disp's name, and their database errors defer its sweeper as its
// own do (runtime.Dispatcher.NoteDBError). Start them after disp and stop them
// before it: the registry then drops disp's row when it stops claiming.
func newMaintenance(store *catalog.Store, blobs blobstore.Store, disp *runtime.Dispatcher, rt runtimeFlags,
	logger *slog.Logger, reg prometheus.Registerer, tracer *tracing.Tracer) (maintenance.Group, error) {
	// Their logs name the dispatcher beside which they run, as its own do.
	logger = logger.With("dispatcher", disp.ID())
	registry, err := maintenance.NewRegistry(store, disp.ID(), disp.Tags(), &maintenance.RegistryConfig{Logger: logger})
	if err != nil {
		return nil, err
	}
	g := maintenance.Group{
		registry,
		maintenance.NewScheduleFirer(store, &maintenance.ScheduleFirerConfig{OnDBError: disp.NoteDBError,
			Logger: logger, Registerer: reg}),
		maintenance.NewEventFlowFirer(store, &maintenance.EventFlowFirerConfig{OnDBError: disp.NoteDBError,
			Logger: logger, Registerer: reg}),
		maintenance.NewOperationWorker(store, &maintenance.OperationWorkerConfig{Owner: disp.ID(), LeaseTTL: rt.leaseTTL,
			OnDBError: disp.NoteDBError, Logger: logger}),
		maintenance.NewReaper(store, blobs, &maintenance.ReaperConfig{Retention: rt.retentionDefaults(), AuditRetention: rt.auditRetention,
			OnDBError: disp.NoteDBError, Logger: logger, Registerer: reg}),
		maintenance.NewSpanExporter(store, &maintenance.SpanExporterConfig{Tracer: tracer, Logger: logger}),
	}
	if cfg := rt.collectorConfig(); cfg != nil {
		if cb, ok := blobs.(maintenance.CollectorBlobs); ok {
			cfg.Owner, cfg.Logger, cfg.Registerer = disp.ID(), logger, reg
			c, err := maintenance.NewCollector(store, cb, cfg)
			if err != nil {
				return nil, err
			}
			g = append(g, c)
		}
	}
	return g, nil
}
