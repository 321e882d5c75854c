package stacktest

import (
	"bufio"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
)

// lambdaZip is what `make lambda-zip` builds, relative to the repository root.
const lambdaZip = "bin/lambda-hello.zip"

func TestComposeImagesPinned(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	for name, s := range c.Services {
		if s.hasBuild() {
			continue
		}
		require.NotEmpty(t, s.Image, "service %s has neither image nor build", name)
		require.True(t, imagePinned(s.Image), "service %s: image %q is not pinned (a tag other than latest, or a digest)", name, s.Image)
	}
}

func TestComposeHealthchecks(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	for _, name := range []string{"postgres", "minio", "localstack"} {
		s := c.service(t, name)
		require.NotNil(t, s.Healthcheck, "%s has no healthcheck: depends_on service_healthy would never hold", name)
		require.False(t, s.Healthcheck.Disable, "%s: healthcheck disabled", name)
		test := nodeStrings(t, s.Healthcheck.Test)
		require.NotEmpty(t, test, "%s: healthcheck without test", name)
		require.Contains(t, []string{"CMD", "CMD-SHELL"}, test[0], "%s: healthcheck test must start with CMD or CMD-SHELL", name)
	}
	// The server's health check comes from the image (Dockerfile HEALTHCHECK).
	require.Nil(t, c.service(t, "cairn").Healthcheck, "cairn: the Dockerfile's HEALTHCHECK is the one to keep")
}

func TestComposeStartOrder(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	cairn := c.service(t, "cairn").dependsOn(t)
	require.Equal(t, "service_healthy", cairn["postgres"])
	require.Equal(t, "service_healthy", cairn["minio"])
	require.Equal(t, "service_completed_successfully", cairn["migrate"])
	require.Equal(t, "service_completed_successfully", cairn["minio-init"], "the bucket must exist before the server checks it")
	require.Equal(t, "service_healthy", c.service(t, "migrate").dependsOn(t)["postgres"])
	require.Equal(t, "service_healthy", c.service(t, "minio-init").dependsOn(t)["minio"])

	// Every dependency names a service.
	for name, s := range c.Services {
		for dep := range s.dependsOn(t) {
			require.Contains(t, c.Services, dep, "service %s depends on unknown %s", name, dep)
		}
	}
	require.Equal(t, []string{"migrate", "up"}, nodeStrings(t, c.service(t, "migrate").Command))
	require.Equal(t, []string{"serve"}, nodeStrings(t, c.service(t, "cairn").Command))
	require.True(t, c.service(t, "cairn").hasBuild(), "cairn is built from the Dockerfile")
	require.True(t, c.service(t, "migrate").hasBuild(), "migrate runs the same image")
}

func TestComposeServerEnvironment(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	env := c.service(t, "cairn").env(t)

	db, err := url.Parse(env["CAIRN_DATABASE_URL"])
	require.NoError(t, err, "CAIRN_DATABASE_URL")
	require.Contains(t, []string{"postgres", "postgresql"}, db.Scheme)
	require.Equal(t, "postgres", db.Hostname(), "CAIRN_DATABASE_URL must point at the postgres service")
	pg := c.service(t, "postgres").env(t)
	require.Equal(t, pg["POSTGRES_USER"], db.User.Username())
	pass, _ := db.User.Password()
	require.Equal(t, pg["POSTGRES_PASSWORD"], pass, "the server's database password is postgres's")
	require.Equal(t, "/"+pg["POSTGRES_DB"], db.Path)
	require.Equal(t, db.String(), c.service(t, "migrate").env(t)["CAIRN_DATABASE_URL"], "migrate and serve use the same database")

	s3, err := blobstore.ParseURL(env["CAIRN_BLOBSTORE"], func(k string) string { return env[k] })
	require.NoError(t, err, "CAIRN_BLOBSTORE")
	endpoint, err := url.Parse(s3.Endpoint)
	require.NoError(t, err)
	require.Equal(t, "minio", endpoint.Hostname(), "CAIRN_BLOBSTORE must point at the minio service")
	minio := c.service(t, "minio").env(t)
	require.Equal(t, minio["MINIO_ROOT_USER"], s3.AccessKey, "the server's S3 credentials are MinIO's")
	require.Equal(t, minio["MINIO_ROOT_PASSWORD"], s3.SecretKey)
	// minio-init creates the bucket the server uses.
	initCmd := strings.Join(nodeStrings(t, c.service(t, "minio-init").Command), " ")
	require.Regexp(t, `\bmb\b.*/`+regexp.QuoteMeta(s3.Bucket)+`$`, initCmd)

	require.NotEmpty(t, env["CAIRN_TOKENS"], "CAIRN_TOKENS")
	tokens, err := api.ParseTokens(env["CAIRN_TOKENS"])
	require.NoError(t, err, "the default CAIRN_TOKENS must be accepted by the server")
	require.Equal(t, api.RoleOperator, tokens.Lookup("change-me-operator-token"), "the README's example token")
	require.Contains(t, env["CAIRN_TOKENS"], "change-me", "default tokens must say they are to be changed")

	lambdaURL, err := url.Parse(env["CAIRN_LAMBDA_ENDPOINT"])
	require.NoError(t, err)
	require.Equal(t, "localstack", lambdaURL.Hostname())
	require.NotEmpty(t, env["AWS_REGION"], "without a region the server runs no lambda steps")

	listen := env["CAIRN_LISTEN"]
	require.True(t, strings.HasPrefix(listen, "0.0.0.0:"), "CAIRN_LISTEN %q: the server must listen beyond the container's loopback", listen)
	_, port, _ := strings.Cut(listen, ":")
	found := false
	for _, p := range c.service(t, "cairn").publishedPorts(t) {
		if strings.HasSuffix(interpolate(p.spec), ":"+port) {
			found = true
		}
	}
	require.True(t, found, "no published port reaches CAIRN_LISTEN's port %s", port)
}

func TestComposePortsOnLoopback(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	for name, s := range c.Services {
		for _, p := range s.publishedPorts(t) {
			require.Equal(t, "127.0.0.1", p.hostIP, "service %s publishes %q beyond 127.0.0.1", name, p.spec)
		}
	}
	require.NotEmpty(t, c.service(t, "cairn").publishedPorts(t), "the API must be reachable from the host")
}

func TestComposeVolumesDeclared(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	for name, s := range c.Services {
		for src := range s.mounts(t) {
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				continue // a bind mount
			}
			require.Contains(t, c.Volumes, src, "service %s mounts undeclared volume %s", name, src)
		}
	}
}

// dockerfile is a parsed Dockerfile: instructions with continuation lines joined.
type dockerfile struct {
	instructions [][2]string // keyword (upper case), arguments
}

func loadDockerfile(t *testing.T) *dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	d := &dockerfile{}
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		kw, args, _ := strings.Cut(cur.String(), " ")
		d.instructions = append(d.instructions, [2]string{strings.ToUpper(kw), strings.TrimSpace(args)})
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	return d
}

func (d *dockerfile) all(kw string) []string {
	var out []string
	for _, in := range d.instructions {
		if in[0] == kw {
			out = append(out, in[1])
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	t.Parallel()

	d := loadDockerfile(t)
	froms := d.all("FROM")
	require.GreaterOrEqual(t, len(froms), 2, "a multi-stage build")
	stages := map[string]bool{}
	for _, from := range froms {
		fields := strings.Fields(from)
		var image string
		for _, f := range fields {
			if !strings.HasPrefix(f, "--") { // --platform=...
				image = f
				break
			}
		}
		if !stages[image] {
			require.True(t, imagePinned(image), "FROM %s: base image not pinned", from)
		}
		if len(fields) >= 3 && strings.EqualFold(fields[len(fields)-2], "AS") {
			stages[fields[len(fields)-1]] = true
		}
	}

	users := d.all("USER")
	require.NotEmpty(t, users, "the image must not run as root")
	last := users[len(users)-1]
	name, _, _ := strings.Cut(last, ":")
	require.NotContains(t, []string{"root", "0"}, name, "USER %s", last)

	// The last HEALTHCHECK counts, in the final stage.
	finalStart := 0
	for i, in := range d.instructions {
		if in[0] == "FROM" {
			finalStart = i
		}
	}
	var health string
	for _, in := range d.instructions[finalStart:] {
		if in[0] == "HEALTHCHECK" {
			health = in[1]
		}
	}
	require.NotEmpty(t, health, "the final stage has no HEALTHCHECK")
	require.NotEqual(t, "NONE", strings.ToUpper(health))
	require.Contains(t, health, "/readyz")
	require.Contains(t, strings.Join(d.all("EXPOSE"), " "), "8080")

	var build string
	for _, run := range d.all("RUN") {
		if strings.Contains(run, "go build") {
			build = run
		}
	}
	require.NotEmpty(t, build, "no go build step")
	env := strings.Join(d.all("ENV"), " ") + " " + build
	require.Contains(t, env, "CGO_ENABLED=0", "the binary must be static")
	require.Contains(t, build, "./cmd/cairn")
}

func TestDockerignore(t *testing.T) {
	t.Parallel()

	data, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	for _, want := range []string{".git", ".env", ".cairn"} {
		require.Contains(t, lines, want, ".dockerignore must keep %s out of the build context", want)
	}
	// The build needs these; an ignore pattern must not drop them.
	for _, l := range lines {
		l = strings.TrimSpace(l)
		require.NotContains(t, []string{"go.mod", "go.sum", "cmd", "*.go", "**/*.go", "migrations"}, l)
	}
}

// TestLocalStackDeploysLambdaZip checks that the init hook deploys the zip that
// `make lambda-zip` builds, through the bind mount compose.yaml declares.
func TestLocalStackDeploysLambdaZip(t *testing.T) {
	t.Parallel()

	c := loadCompose(t)
	mounts := c.service(t, "localstack").mounts(t)
	const readyDir = "/etc/localstack/init/ready.d"
	hostReady := ""
	for src, dst := range mounts {
		if path.Clean(dst) == readyDir {
			hostReady = src
		}
	}
	require.NotEmpty(t, hostReady, "no host folder mounted at %s", readyDir)
	require.Equal(t, "/var/run/docker.sock", mounts["/var/run/docker.sock"], "LocalStack runs Lambda functions through the Docker socket")

	scripts, err := filepath.Glob(filepath.Join(repoRoot, hostReady, "*.sh"))
	require.NoError(t, err)
	require.NotEmpty(t, scripts, "no init script in %s", hostReady)

	// Absolute zip paths (inside the container), to be mapped back to the host.
	zipRE := regexp.MustCompile(`(?:^|[\s="':])(/[A-Za-z0-9_./-]+\.zip)\b`)
	deployed := false
	for _, script := range scripts {
		info, err := os.Stat(script)
		require.NoError(t, err)
		require.NotZero(t, info.Mode()&0o111, "%s must be executable", script)
		data, err := os.ReadFile(script)
		require.NoError(t, err)
		text := string(data)
		require.True(t, strings.HasPrefix(text, "#!"), "%s needs a shebang", script)
		if !strings.Contains(text, "lambda create-function") {
			continue
		}
		deployed = true
		require.Contains(t, text, "--runtime provided.al2023")
		require.Contains(t, text, "--handler bootstrap")
		matches := zipRE.FindAllStringSubmatch(text, -1)
		require.NotEmpty(t, matches, "%s: no zip path", script)
		for _, m := range matches {
			hostPath := ""
			for src, dst := range mounts {
				if rel, ok := strings.CutPrefix(m[1], path.Clean(dst)+"/"); ok {
					hostPath = path.Join(src, rel)
				}
			}
			require.Equal(t, lambdaZip, path.Clean(hostPath), "%s deploys %s, which is not where make lambda-zip writes", script, m[1])
		}
		require.Contains(t, text, "cairn-hello")
	}
	require.True(t, deployed, "no init script deploys the example Lambda function")

	// The example's manifest invokes the function the hook deploys.
	manifest, err := os.ReadFile(filepath.Join(repoRoot, "examples/lambda-hello/cairn.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(manifest), `function: "cairn-hello"`)

	// Once the lead has added the target, the Makefile must write the same zip.
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	if strings.Contains(string(makefile), "\nlambda-zip:") {
		require.Contains(t, string(makefile), lambdaZip)
	} else {
		t.Log("Makefile has no lambda-zip target yet: only the compose side is checked")
	}
}
