package cairntest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"

	_ "github.com/lib/pq" // the driver of the readiness check of PostgreSQL's container
)

// Defaults of DockerConfig.
const (
	// DefaultImage is the server's image: what `docker build -t cairn:local .`
	// (and compose.yaml) makes from the repository's Dockerfile.
	DefaultImage = "cairn:local"
	// DefaultPostgresImage is PostgreSQL's image, the one compose.yaml runs.
	DefaultPostgresImage = "postgres:16.4"
	// dockerStartTimeout bounds the containers' start: the server's /readyz
	// answering 200 (an image pulled before).
	dockerStartTimeout = 2 * time.Minute
)

// DockerConfig is the containers WithDocker starts.
type DockerConfig struct {
	// Endpoint is the engine's address; default DOCKER_HOST, else the default
	// socket (unix:///var/run/docker.sock). Podman's Docker-compatible socket
	// works too.
	Endpoint string
	// Image is the server's image, repository:tag; default DefaultImage. It is
	// pulled when the engine does not have it.
	Image string
	// PostgresImage is PostgreSQL's; default DefaultPostgresImage.
	PostgresImage string
	// Env adds KEY=value settings to the server's container (CAIRN_* variables,
	// docs/operations.md), over those cairntest sets: CAIRN_DATABASE_URL,
	// CAIRN_BLOBSTORE (a file store in the container), CAIRN_TOKENS,
	// CAIRN_SIGNING_KEY, CAIRN_SECRET_KEY and CAIRN_EXEC_ISOLATION=none (the
	// default seccomp profile of Docker refuses bubblewrap's namespaces; see the
	// Dockerfile).
	Env []string
}

// WithDocker runs the server from cfg.Image, with its catalog in a PostgreSQL
// container, on a network of their own, through a Docker-compatible engine:
// `cairn migrate up`, then `cairn serve`, as compose.yaml does. The API's port is
// published on the engine's host. t.Cleanup removes the containers and the
// network. Start fails t when no engine answers.
func WithDocker(cfg DockerConfig) Option {
	return func(o *options) { o.docker = &cfg }
}

// startDocker starts PostgreSQL and the server in containers and returns the
// API's URL once /readyz answers 200. The server's output goes to logs when t
// ends.
func startDocker(t testing.TB, cfg DockerConfig, tokens Tokens, logs *logTail) (string, error) {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.PostgresImage == "" {
		cfg.PostgresImage = DefaultPostgresImage
	}
	pool, err := dockertest.NewPool(cfg.Endpoint)
	if err != nil {
		return "", fmt.Errorf("docker: %w", err)
	}
	pool.MaxWait = dockerStartTimeout
	ctx, cancel := context.WithTimeout(context.Background(), dockerStartTimeout)
	defer cancel()
	if err := pool.Client.PingWithContext(ctx); err != nil {
		return "", fmt.Errorf("no Docker engine answers at %s: %w", engineName(cfg.Endpoint), err)
	}
	suffix := strings.ToLower(newToken()[:10])
	suffix = strings.NewReplacer("_", "0", "-", "0").Replace(suffix)
	network, err := pool.CreateNetwork("cairntest-" + suffix)
	if err != nil {
		return "", fmt.Errorf("docker network: %w", err)
	}
	t.Cleanup(func() { _ = pool.RemoveNetwork(network) })

	// PostgreSQL, reached by the server as "cairntest-pg-<suffix>" on the network
	// and by this process through its published port.
	pgName, password := "cairntest-pg-"+suffix, newToken()
	repo, tag := splitImage(cfg.PostgresImage)
	pg, err := pool.RunWithOptions(&dockertest.RunOptions{
		Name: pgName, Repository: repo, Tag: tag, Networks: []*dockertest.Network{network},
		Env: []string{"POSTGRES_USER=cairn", "POSTGRES_PASSWORD=" + password, "POSTGRES_DB=cairn"},
		Cmd: []string{"postgres", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"},
	}, noRestart)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", cfg.PostgresImage, err)
	}
	t.Cleanup(func() { _ = pool.Purge(pg) })
	host := engineHost(cfg.Endpoint)
	if err := pool.Retry(func() error {
		return pingPostgres(ctx, fmt.Sprintf("postgres://cairn:%s@%s/cairn?sslmode=disable", password, net.JoinHostPort(host, pg.GetPort("5432/tcp"))))
	}); err != nil {
		return "", fmt.Errorf("%s did not accept connections: %w", cfg.PostgresImage, err)
	}
	dbURL := fmt.Sprintf("postgres://cairn:%s@%s:5432/cairn?sslmode=disable", password, pgName)

	repo, tag = splitImage(cfg.Image)
	migrate, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: repo, Tag: tag, Networks: []*dockertest.Network{network},
		Cmd: []string{"migrate", "up"}, Env: []string{"CAIRN_DATABASE_URL=" + dbURL},
	}, noRestart)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", cfg.Image, err)
	}
	t.Cleanup(func() { _ = pool.Purge(migrate) })
	code, err := pool.Client.WaitContainerWithContext(migrate.Container.ID, ctx)
	if err != nil || code != 0 {
		containerLogs(pool, migrate, logs)
		return "", fmt.Errorf("cairn migrate up in %s: exit %d: %v (its output is in the server's log)", cfg.Image, code, err)
	}

	env := []string{
		"CAIRN_DATABASE_URL=" + dbURL,
		"CAIRN_BLOBSTORE=file:///tmp/cairn-blobs",
		fmt.Sprintf("CAIRN_TOKENS=viewer:%s,operator:%s,admin:%s", tokens.Viewer, tokens.Operator, tokens.Admin),
		"CAIRN_SIGNING_KEY=" + newToken(),
		"CAIRN_SECRET_KEY=" + newToken(),
		"CAIRN_EXEC_ISOLATION=none",
		"CAIRN_LISTEN=0.0.0.0:8080",
	}
	server, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: repo, Tag: tag, Networks: []*dockertest.Network{network},
		Cmd: []string{"serve"}, Env: append(env, cfg.Env...), ExposedPorts: []string{"8080/tcp"},
	}, noRestart)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", cfg.Image, err)
	}
	t.Cleanup(func() {
		containerLogs(pool, server, logs)
		_ = pool.Purge(server)
	})
	apiURL := "http://" + net.JoinHostPort(host, server.GetPort("8080/tcp"))
	if err := pool.Retry(func() error { return ready(ctx, apiURL) }); err != nil {
		return "", fmt.Errorf("%s did not answer /readyz: %w", cfg.Image, err)
	}
	return apiURL, nil
}

// noRestart keeps the engine from restarting a container that exits.
func noRestart(hc *docker.HostConfig) { hc.RestartPolicy = docker.RestartPolicy{Name: "no"} }

// splitImage splits repository:tag (a registry's port is no tag); no tag is
// "latest", which the pinned defaults never use.
func splitImage(image string) (repo, tag string) {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, "latest"
	}
	return image[:i], image[i+1:]
}

// engineName names the engine for an error: the endpoint, DOCKER_HOST or the
// default socket.
func engineName(endpoint string) string {
	switch {
	case endpoint != "":
		return endpoint
	case os.Getenv("DOCKER_HOST") != "":
		return "DOCKER_HOST=" + os.Getenv("DOCKER_HOST")
	}
	return "the default socket (set DOCKER_HOST)"
}

// engineHost is where the engine publishes ports: the host of a tcp:// endpoint,
// else this machine.
func engineHost(endpoint string) string {
	if endpoint == "" {
		endpoint = os.Getenv("DOCKER_HOST")
	}
	if u, err := url.Parse(endpoint); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		return u.Hostname()
	}
	return "127.0.0.1"
}

// pingPostgres connects to the database at dsn once.
func pingPostgres(ctx context.Context, dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// ready asks the server at apiURL's /readyz once.
func ready(ctx context.Context, apiURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// containerLogs copies a container's output into logs.
func containerLogs(pool *dockertest.Pool, r *dockertest.Resource, logs *logTail) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = pool.Client.Logs(docker.LogsOptions{Context: ctx, Container: r.Container.ID,
		OutputStream: logs, ErrorStream: logs, Stdout: true, Stderr: true})
}
