package cairntest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/devdb"
	"github.com/cairnrun/cairn/internal/pglocal"
	"github.com/cairnrun/cairn/runtime"
	"github.com/cairnrun/cairn/secrets"
)

// stopTimeout bounds each part's stop at the end of a test.
const stopTimeout = 30 * time.Second

// startLocal runs a server in this process, as `cairn dev` does: a PostgreSQL
// cluster of the installed binaries, the catalog as a role that is no superuser,
// a file blob store, a dispatcher (exec, http and built-in steps; no lambda) and
// the API on 127.0.0.1. It returns the API's URL; t.Cleanup stops it all.
func startLocal(t testing.TB, tokens Tokens, logger *slog.Logger) (string, error) {
	ctx := context.Background() // the server outlives t.Context(), which ends before the cleanups
	dir, err := tempDir(t)
	if err != nil {
		return "", err
	}
	cluster, err := pglocal.Start(ctx, pglocal.Config{
		DataDir: filepath.Join(dir, "pg"), Logger: logger,
		// A test binary killed mid-test takes its PostgreSQL with it.
		DieWithParent: true,
		// A test's data need not survive a power cut.
		Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"},
	})
	if err != nil {
		return "", fmt.Errorf("PostgreSQL: %w", err)
	}
	t.Cleanup(func() { stopped(logger, "PostgreSQL", cluster.Stop) })
	store, dbURL, err := devdb.Open(ctx, cluster, "cairn", &devdb.Config{Logger: logger, Password: newToken})
	if err != nil {
		return "", err
	}
	t.Cleanup(func() { _ = store.Close() })
	blobs, err := blobstore.NewFile(filepath.Join(dir, "blobs"), nil)
	if err != nil {
		return "", fmt.Errorf("blob store: %w", err)
	}
	keys, err := secrets.ParseKeyring(newToken(), "")
	if err != nil {
		return "", err
	}
	apiTokens := &api.Tokens{}
	for role, tok := range map[api.Role]string{api.RoleViewer: tokens.Viewer, api.RoleOperator: tokens.Operator, api.RoleAdmin: tokens.Admin} {
		if err := apiTokens.Add(role, tok); err != nil {
			return "", err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	url := "http://" + ln.Addr().String()
	signingKey := []byte(newToken())
	disp, err := runtime.New(store, blobs, &runtime.Config{
		DatabaseURL: dbURL,
		Logger:      logger,
		Handlers: runtime.HandlerConfig{CacheDir: filepath.Join(dir, "cache"),
			SigningKey: signingKey,
			Secrets:    secrets.NewVault(store, keys),
			PublicURL:  url,
			Invokers: map[bundle.Kind]functions.Invoker{
				bundle.KindExec: execInvoker(logger),
				bundle.KindHTTP: functions.NewHTTP(&functions.HTTPConfig{SigningKey: signingKey, Logger: logger, AllowLocal: true}),
			},
		},
	})
	if err != nil {
		ln.Close()
		return "", err
	}
	srv := api.New(store, blobs, &api.Config{Logger: logger, Tokens: apiTokens, SigningKey: signingKey,
		SecretKeys: keys, Capabilities: disp.Capabilities, TempDir: dir})
	if err := disp.Start(ctx); err != nil {
		ln.Close()
		return "", err
	}
	t.Cleanup(func() { stopped(logger, "dispatcher", disp.Stop) })
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	httpSrv.RegisterOnShutdown(srv.CloseStreams)
	go func() {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serve", "error", err)
		}
	}()
	t.Cleanup(func() {
		stopped(logger, "HTTP server", httpSrv.Shutdown)
		_ = httpSrv.Close()
	})
	return url, nil
}

// execInvoker isolates exec handlers in a bubblewrap sandbox where that works, as
// `cairn dev` does, else runs them unisolated and says so in the log.
func execInvoker(logger *slog.Logger) *functions.Exec {
	cfg := &functions.ExecConfig{Logger: logger, Isolation: functions.IsolationBwrap}
	inv := functions.NewExec(cfg)
	if _, err := inv.Isolation(); err != nil {
		logger.Warn("cairntest: exec handlers run UNISOLATED, as the test's user", "reason", err)
		cfg.Isolation = functions.IsolationNone
		inv = functions.NewExec(cfg)
	}
	return inv
}

// stopped runs stop with a bounded context and logs a failure.
func stopped(logger *slog.Logger, what string, stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := stop(ctx); err != nil {
		logger.Warn("cairntest: stop "+what, "error", err)
	}
}
