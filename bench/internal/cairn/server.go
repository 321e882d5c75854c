// Package cairn drives Cairn from the outside, as a user does: the `cairn` binary
// (migrate, serve) as child processes, and the HTTP API.
package cairn

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairnrun/cairn/bench/internal/proc"
)

// Token is the admin bearer token every benchmark server accepts.
const Token = "bench-admin-token"

// ServerConfig describes one `cairn serve` process.
type ServerConfig struct {
	// Bin is the cairn binary.
	Bin string
	// DatabaseURL and BlobURL become CAIRN_DATABASE_URL and CAIRN_BLOBSTORE.
	DatabaseURL string
	BlobURL     string
	// Env holds extra variables (the S3 credentials).
	Env []string
	// NoDispatcher serves the API only.
	NoDispatcher bool
	// Concurrency is CAIRN_CONCURRENCY; 0 keeps Cairn's default (128).
	Concurrency int
	// LeaseTTL is CAIRN_LEASE_TTL; 0 keeps Cairn's default (30s).
	LeaseTTL time.Duration
	// Dir receives the process's log and cache.
	Dir string
	// Name tells processes apart in file names.
	Name string
}

// Server is a running `cairn serve`.
type Server struct {
	URL     string
	LogPath string
	// Ready is how long the process took from exec to its first /readyz 200.
	Ready time.Duration
	child *proc.Child
}

// Migrate runs `cairn migrate up` on the database.
func Migrate(ctx context.Context, bin, dbURL string) error {
	cmd := exec.CommandContext(ctx, bin, "migrate", "up", "--database-url", dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cairn migrate up: %w: %s", err, out)
	}
	return nil
}

// Version returns the git revision the binary was built from: from its build
// information when the build stamped it, else from the working tree (`git` in the
// current directory), with "+modified" and the changed tracked files when the tree
// differs from the commit.
func Version(bin string) string {
	if out, err := exec.Command("go", "version", "-m", bin).Output(); err == nil {
		rev, modified := "", ""
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "build" {
				k, v, _ := strings.Cut(f[1], "=")
				switch k {
				case "vcs.revision":
					rev = v
				case "vcs.modified":
					modified = v
				}
			}
		}
		if rev != "" {
			if modified == "true" {
				rev += "+modified"
			}
			return rev
		}
	}
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil {
		var changed []string
		for _, line := range strings.Split(strings.TrimRight(string(st), "\n"), "\n") {
			if len(line) > 3 {
				changed = append(changed, strings.TrimSpace(line[3:]))
			}
		}
		if len(changed) > 0 {
			rev += "+modified (" + strings.Join(changed, ", ") + ")"
		}
	}
	return rev
}

// StartServer starts `cairn serve` on a free port and returns once /readyz answers
// 200. The process gets SIGKILL if the benchmark dies.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	cache := filepath.Join(cfg.Dir, cfg.Name+"-cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.Dir, cfg.Name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := []string{"serve"}
	if cfg.NoDispatcher {
		args = append(args, "--no-dispatcher")
	}
	cmd := exec.Command(cfg.Bin, args...)
	cmd.Env = append(os.Environ(),
		"CAIRN_LISTEN="+addr,
		"CAIRN_DATABASE_URL="+cfg.DatabaseURL,
		"CAIRN_BLOBSTORE="+cfg.BlobURL,
		"CAIRN_TOKENS=admin:"+Token,
		"CAIRN_SIGNING_KEY=bench-signing-key",
		"CAIRN_CACHE_DIR="+cache,
		"CAIRN_LOG_LEVEL=warn",
	)
	cmd.Env = append(cmd.Env, cfg.Env...)
	if cfg.Concurrency > 0 {
		cmd.Env = append(cmd.Env, "CAIRN_CONCURRENCY="+strconv.Itoa(cfg.Concurrency))
	}
	if cfg.LeaseTTL > 0 {
		cmd.Env = append(cmd.Env, "CAIRN_LEASE_TTL="+cfg.LeaseTTL.String())
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	child, err := proc.Start(cmd, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, LogPath: logPath, child: child}
	if err := proc.WaitReady(ctx, s.URL+"/readyz", child, logPath, 2*time.Minute); err != nil {
		child.Kill()
		return nil, fmt.Errorf("cairn serve (%s): %w", cfg.Name, err)
	}
	s.Ready = time.Since(child.Started)
	return s, nil
}

// Pid returns the process id.
func (s *Server) Pid() int { return s.child.Pid }

// Stop shuts the server down (SIGTERM: running attempts are handed back), SIGKILL
// after 30 s.
func (s *Server) Stop() { s.child.Stop(syscall.SIGTERM, 30*time.Second) }

// Kill ends the process with SIGKILL, as a crash would.
func (s *Server) Kill() { s.child.Kill() }

// MemoryMiB returns VmRSS or VmHWM of the process in MiB.
func (s *Server) MemoryMiB(field string) float64 {
	kib, err := proc.MemoryKiB(s.child.Pid, field)
	if err != nil {
		return 0
	}
	return float64(kib) / 1024
}

// CPUSeconds returns the processor time of the process and its reaped children (the
// exec handlers it ran).
func (s *Server) CPUSeconds() float64 {
	c := s.CPU()
	return c.Self + c.Children
}

// CPU returns the processor time of the process itself and of its reaped children
// apart.
func (s *Server) CPU() proc.CPU {
	c, _ := proc.ProcessCPU(s.child.Pid)
	return c
}

// Metrics returns the server's Prometheus series, each value summed over its labels.
func (s *Server) Metrics(ctx context.Context) (map[string]float64, error) {
	return s.metrics(ctx, false)
}

// MetricSeries returns the server's Prometheus series apart, keyed
// "name|v1,v2" (the values of its labels, in order); a histogram's sum and
// count are "base|v1,v2_sum" and "base|v1,v2_count".
func (s *Server) MetricSeries(ctx context.Context) (map[string]float64, error) {
	return s.metrics(ctx, true)
}

func (s *Server) metrics(ctx context.Context, apart bool) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body, apart)
}

// parseMetrics reads Prometheus' text format, summing each series over its
// labels, or keeping them apart (MetricSeries' keys).
func parseMetrics(r io.Reader, apart bool) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// name{labels} value [timestamp]; label values may hold spaces.
		name, value, _ := strings.Cut(line, " ")
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, value = line[:i], line[i+1:j], line[j+1:]
		}
		f := strings.Fields(value)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if apart {
			name = seriesKey(name, labels)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// seriesKey is MetricSeries' key of a series.
func seriesKey(name, labels string) string {
	var vals []string
	for _, kv := range strings.Split(labels, ",") {
		if _, v, ok := strings.Cut(kv, "="); ok {
			vals = append(vals, strings.Trim(v, `"`))
		}
	}
	suffix := ""
	for _, x := range []string{"_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, x); ok {
			name, suffix = base, x
		}
	}
	return name + "|" + strings.Join(vals, ",") + suffix
}
