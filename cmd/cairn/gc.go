package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime"
)

// registerGC adds the blob collector's and the cache's flags: --gc-interval,
// --gc-grace, --gc-dry-run and --cache-max-bytes.
func (f *runtimeFlags) registerGC(fs *pflag.FlagSet) {
	fs.DurationVar(&f.gcInterval, "gc-interval", maintenance.DefaultGCInterval, "how often the blob garbage collector deletes the payloads, logs and bundles no catalog row names (one pass at a time across servers); 0: this server runs none")
	fs.DurationVar(&f.gcGrace, "gc-grace", maintenance.DefaultGCGrace, "age under which the blob collector keeps any object (longer than the longest upload), and past which it removes leftovers of crashed uploads (.tmp/, incomplete multipart uploads)")
	fs.BoolVar(&f.gcDryRun, "gc-dry-run", false, "the blob collector deletes nothing: it logs what it would delete")
	fs.Int64Var(&f.cacheMaxBytes, "cache-max-bytes", runtime.DefaultCacheMaxBytes, "cap of the cache folder, in bytes: past it, the bundles and inputs used least recently (and by no running attempt) are removed; 0: no cap")
	bindEnv(fs, map[string]string{
		"gc-interval":     "CAIRN_GC_INTERVAL",
		"gc-grace":        "CAIRN_GC_GRACE",
		"gc-dry-run":      "CAIRN_GC_DRY_RUN",
		"cache-max-bytes": "CAIRN_CACHE_MAX_BYTES",
	})
}

// cacheMaxBytesConfig maps --cache-max-bytes to runtime.Config.Handlers.CacheMaxBytes: 0 means
// no cap there.
func (f *runtimeFlags) cacheMaxBytesConfig() int64 {
	if f.cacheMaxBytes <= 0 {
		return -1
	}
	return f.cacheMaxBytes
}

// collectorConfig maps the flags to the blob collector's config; nil when
// --gc-interval is 0 or less: this server runs none.
func (f *runtimeFlags) collectorConfig() *maintenance.CollectorConfig {
	if f.gcInterval <= 0 {
		return nil
	}
	return &maintenance.CollectorConfig{Interval: f.gcInterval, Grace: f.gcGrace, DryRun: f.gcDryRun}
}

// newGCCmd is `cairn gc`: one pass of the blob collector now, against the
// catalog and blob store given (as serve takes them).
func newGCCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var dbURL, blobURL, poolMode string
	var dryRun, asJSON bool
	var grace = maintenance.DefaultGCGrace
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete the blobs no catalog row names, and leftovers of crashed uploads (one pass now)",
		Long: `Runs one pass of the blob garbage collector that every server runs every --gc-interval:
it deletes the payloads, logs and bundles that no run, version, schedule or archive names and
that are older than --grace, and the temporary objects and incomplete multipart uploads older
than --grace. With --dry-run it deletes nothing and reports what it would delete. A pass
running on a server makes this one wait for it to end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if blobURL == "" {
				return errors.New("no blob store: set --blobstore or CAIRN_BLOBSTORE")
			}
			pooling, err := transactionPooling(poolMode)
			if err != nil {
				return err
			}
			logger := newLogger(e, stderr)
			store, blobs, err := openBackends(ctx, e, dbURL, blobURL, logger, 0, pooling)
			if err != nil {
				return err
			}
			defer store.Close()
			cb, ok := blobs.(maintenance.CollectorBlobs)
			if !ok {
				return fmt.Errorf("blob store %s cannot be listed", blobURL)
			}
			c, err := maintenance.NewCollector(store, cb, &maintenance.CollectorConfig{Grace: grace, DryRun: dryRun, Logger: logger})
			if err != nil {
				return err
			}
			rep, err := c.Collect(ctx, true)
			if err != nil {
				return err
			}
			if rep.Skipped {
				return errors.New("another server's collector pass is running; try again when it ends")
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			verb := "deleted"
			if rep.DryRun {
				verb = "would delete"
			}
			fmt.Fprintf(stdout, "scanned %d objects (%d bytes)\n", rep.ScannedObjects, rep.ScannedBytes)
			fmt.Fprintf(stdout, "%s %d unreferenced objects (%d bytes)\n", verb, rep.DeletedObjects, rep.DeletedBytes)
			for _, kind := range []string{blobstore.KindPayloads, blobstore.KindLogs, blobstore.KindBundles} {
				if kc, ok := rep.ByKind[kind]; ok {
					fmt.Fprintf(stdout, "  %s: %d objects (%d bytes)\n", kind, kc.Objects, kc.Bytes)
				}
			}
			fmt.Fprintf(stdout, "%s %d temporary objects (%d bytes) and %d incomplete uploads (%d bytes)\n",
				verb, rep.Temp.Objects, rep.Temp.Bytes, rep.Temp.Uploads, rep.Temp.UploadBytes)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	f.StringVar(&poolMode, "database-pool-mode", "session", poolModeUsage)
	f.StringVar(&blobURL, "blobstore", "", "blob store URL: file:///path or s3://bucket?endpoint=http://host:9000&region=us-east-1")
	f.BoolVar(&dryRun, "dry-run", false, "delete nothing; report what would be deleted")
	f.DurationVar(&grace, "grace", maintenance.DefaultGCGrace, "age under which objects and claims are kept (as the servers' --gc-grace)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	bindEnv(f, map[string]string{
		"database-url":       "CAIRN_DATABASE_URL",
		"database-pool-mode": "CAIRN_DATABASE_POOL_MODE",
		"blobstore":          "CAIRN_BLOBSTORE",
		"grace":              "CAIRN_GC_GRACE",
		"dry-run":            "CAIRN_GC_DRY_RUN",
	})
	return cmd
}
