package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/pglocal"
)

// devDatabase is the database `cairn dev` keeps its catalog in.
const devDatabase = "cairn"

func newDevCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var dataDir, listen string
	var watch []string
	var extra extraTokens
	var rf runtimeFlags
	var lf limitFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process: API, dispatcher, a private PostgreSQL and a file blob store",
		Long: `dev needs no configuration. It keeps its state under --data-dir (default ./.cairn):
a PostgreSQL cluster started from the installed binaries, the blob store, and a
credentials file with the URL and freshly generated tokens that the CLI reads.
PostgreSQL asks every connection for a password (the superuser's is in
pg/superuser-password); the server works as cairn_app, which is no superuser.
Tokens of --tokens (CAIRN_TOKENS) and --tokens-file (CAIRN_TOKENS_FILE), such as two
named operators to try approvals with, are served beside the generated ones.
--watch DIR (repeatable) deploys the bundle folder DIR once the server is ready
and again on every save, once the folder has been quiet for a moment: a save
that does not validate prints its problems and leaves latest where it was.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(rf.check(), lf.check(), checkWatchDirs(watch)); err != nil {
				return err
			}
			return runDev(cmd.Context(), e, stdout, stderr, dataDir, listen, extra, watch, rf, lf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".cairn", "folder for the database, blobs and credentials")
	f.StringVar(&listen, "listen", defaultListen, "address to serve HTTP on")
	f.StringVar(&extra.spec, "tokens", "", "more bearer tokens, beside the generated ones: role:token or role:name:token, comma-separated")
	f.StringVar(&extra.file, "tokens-file", "", "file of more role:token or role:name:token lines")
	f.StringArrayVar(&watch, "watch", nil, "bundle folder to validate and deploy on every save (repeatable)")
	bindEnv(f, map[string]string{"listen": "CAIRN_LISTEN", "tokens": "CAIRN_TOKENS", "tokens-file": "CAIRN_TOKENS_FILE"})
	rf.register(f, true)
	lf.register(f)
	return cmd
}

// extraTokens are the tokens `cairn dev` serves beside those it generates.
type extraTokens struct{ spec, file string }

func runDev(ctx context.Context, e env, stdout, stderr io.Writer, dataDir, listen string, extra extraTokens, watch []string, rf runtimeFlags, lf limitFlags) (err error) {
	logger := newLogger(e, stderr)
	// Read before anything starts: a mistake in them fails at once.
	configured, err := loadTokens(extra.spec, extra.file)
	if err != nil {
		return err
	}
	dataDir, err = filepath.Abs(dataDir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}

	logger.Info("starting PostgreSQL", "data_dir", filepath.Join(dataDir, "pg"))
	cluster, err := pglocal.Start(ctx, pglocal.Config{
		DataDir: filepath.Join(dataDir, "pg"),
		Logger:  logger,
		Getenv:  e,
		// A `cairn dev` killed with SIGKILL takes its PostgreSQL down with it
		// (immediate shutdown; the next start recovers from the WAL).
		DieWithParent: true,
	})
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer func() {
		// Stop the database even when ctx is done: that is the normal way out.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := cluster.Stop(sctx); serr != nil {
			logger.Error("stop PostgreSQL", "error", serr)
		} else {
			logger.Info("PostgreSQL stopped")
		}
	}()
	store, dbURL, err := openDevCatalog(ctx, cluster, logger, rf.idempotencyTTL)
	if err != nil {
		return err
	}
	defer store.Close()
	blobs, err := blobstore.NewFile(filepath.Join(dataDir, "blobs"), nil)
	if err != nil {
		return fmt.Errorf("open blob store: %w", err)
	}

	if rf.signingKey == "" {
		if rf.signingKey, err = devSecret(filepath.Join(dataDir, "signing-key")); err != nil {
			return err
		}
	}
	if rf.secretKey == "" {
		if rf.secretKey, err = devSecret(filepath.Join(dataDir, "secret-key")); err != nil {
			return err
		}
	}
	if rf.cacheDir == "" {
		rf.cacheDir = filepath.Join(dataDir, "cache")
	}
	creds := devCredentials{
		viewer:   newToken(),
		operator: newToken(),
		admin:    newToken(),
	}
	tokens := &api.Tokens{}
	for role, tok := range map[api.Role]string{api.RoleViewer: creds.viewer, api.RoleOperator: creds.operator, api.RoleAdmin: creds.admin} {
		if err := tokens.Add(role, tok); err != nil {
			return err
		}
	}
	tokens.Merge(configured)
	credPath := filepath.Join(dataDir, "credentials")
	lambdaInvoker, err := newLambdaInvoker(ctx, e, logger)
	if err != nil {
		return err
	}
	parts := serverParts{lambda: lambdaInvoker, listen: listen, dbURL: dbURL, store: store, blobs: blobs, tokens: tokens, logger: logger, rt: rf, limits: lf, getenv: e}
	return runServer(ctx, parts, func(addr string) {
		creds.server = "http://" + addr
		if err := os.WriteFile(credPath, []byte(creds.file()), 0o600); err != nil {
			logger.Error("write credentials", "path", credPath, "error", err)
		}
		// The tokens stay in the credentials file (mode 0600): stdout often ends up
		// in a log or a terminal recording. The one exception is the operator
		// token of the UI's one-click login (docs/ui.md): a local dev
		// server's token, printed once.
		fmt.Fprintf(stdout, "Cairn dev server ready at %s\n", creds.server)
		fmt.Fprintf(stdout, "  credentials: %s (server URL and viewer, operator and admin tokens)\n", credPath)
		fmt.Fprintf(stdout, "  in a shell:  set -a; . %s; set +a\n", shellQuote(credPath))
		fmt.Fprintf(stdout, "  the CLI reads ./.cairn/credentials by default\n")
		if n := configured.Len(); n > 0 {
			fmt.Fprintf(stdout, "  also serving the %d tokens of CAIRN_TOKENS and CAIRN_TOKENS_FILE\n", n)
		}
		// The one-click login carries the operator token in the URL's fragment,
		// which a browser never sends: it stays out of the server's logs and
		// history (the login page moves it into a form, then drops it).
		fmt.Fprintf(stdout, "  web UI:      %s/ui/\n", creds.server)
		fmt.Fprintf(stdout, "  log in as operator: %s/ui/login#token=%s\n", creds.server, creds.operator)
		if len(watch) > 0 {
			cl, err := client.New(creds.server, creds.operator)
			if err != nil {
				logger.Error("watch", "error", err)
				return
			}
			watchBundles(ctx, newCLI(e, stdout, stderr), cl, watch, logger)
		}
	})
}

// devCredentials is what `cairn dev` writes for shells and the CLI
// (./.cairn/credentials, README.md "Five-minute tour").
type devCredentials struct {
	server, viewer, operator, admin string
}

func (c devCredentials) file() string {
	var b strings.Builder
	fmt.Fprintf(&b, "CAIRN_SERVER=%s\n", c.server)
	fmt.Fprintf(&b, "CAIRN_VIEWER_TOKEN=%s\n", c.viewer)
	fmt.Fprintf(&b, "CAIRN_OPERATOR_TOKEN=%s\n", c.operator)
	fmt.Fprintf(&b, "CAIRN_ADMIN_TOKEN=%s\n", c.admin)
	fmt.Fprintf(&b, "CAIRN_TOKEN=%s\n", c.operator)
	return b.String()
}

// newToken returns 32 random bytes, base64url: unguessable and shell-safe.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// devSecret reads a secret kept in the data dir, making it on first use, so that
// restarts of `cairn dev` keep signing with the same key.
func devSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	secret := newToken()
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return secret, nil
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe characters.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+:@%,", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
