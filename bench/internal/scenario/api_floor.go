package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/cairnrun/cairn/bench/internal/proc"
	"github.com/cairnrun/cairn/catalog"
)

// APIFloorCommand is the bench binary's first argument that makes it the api
// scenario's floor server (ServeAPIFloor) instead of the benchmark.
const APIFloorCommand = "api-floor-server"

// ServeAPIFloor is the floor of the api scenario: a minimal net/http server that
// answers get-run and create-run with the statements Cairn's server runs for
// them, through Cairn's own catalog package (the same lib/pq driver, the same
// prepared statements, the same Store.RunGet and Store.RunCreate), and nothing
// else: no authentication, middleware, validation or framework. It runs in a
// process of its own, as `cairn serve` does, so that both pay the same wake-ups
// between client and server. It listens on listen, connects to dbURL and serves
// until ctx ends.
func ServeAPIFloor(ctx context.Context, dbURL, listen string) error {
	store, err := catalog.Open(ctx, dbURL, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := uuid.Parse(r.PathValue("id"))
		if err != nil {
			http.Error(w, "bad id", http.StatusBadRequest)
			return
		}
		run, err := store.RunGet(r.Context(), id)
		writeFloorRun(w, http.StatusOK, run, err)
	})
	mux.HandleFunc("POST /v1/workflows/{name}/runs", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Input json.RawMessage `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		run, _, err := store.RunCreate(r.Context(), &catalog.RunCreateParams{Workflow: r.PathValue("name"), Input: body.Input})
		writeFloorRun(w, http.StatusAccepted, run, err)
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.WithoutCancel(ctx))
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// floorRun is the floor's response: the fields of Cairn's Run it has at hand,
// so that both encode a body of about the same size.
type floorRun struct {
	ID             string            `json:"id"`
	Workflow       string            `json:"workflow"`
	Version        int               `json:"version"`
	Status         string            `json:"status"`
	Input          catalog.JSON      `json:"input"`
	Error          catalog.JSON      `json:"error"`
	Revision       int64             `json:"revision"`
	StepsTotal     int               `json:"steps_total"`
	StepsRemaining int               `json:"steps_remaining"`
	CreatedAt      time.Time         `json:"created_at"`
	StartedAt      *time.Time        `json:"started_at"`
	FinishedAt     *time.Time        `json:"finished_at"`
	Labels         map[string]string `json:"labels"`
}

func writeFloorRun(w http.ResponseWriter, status int, run *catalog.Run, err error) {
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		http.Error(w, "not found", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(floorRun{
		ID: run.ID.String(), Workflow: run.Workflow, Version: run.Version, Status: string(run.Status),
		Input: run.Input, Error: run.Error, Revision: run.Revision, StepsTotal: run.StepsTotal,
		StepsRemaining: run.StepsRemaining, CreatedAt: run.CreatedAt, StartedAt: run.StartedAt,
		FinishedAt: run.FinishedAt, Labels: run.Labels,
	})
}

// floorServer is a running floor server (ServeAPIFloor in a child process).
type floorServer struct {
	URL   string
	child *proc.Child
}

// startAPIFloor starts the floor server on the current catalog, as Cairn's role,
// by running this binary again with APIFloorCommand; it returns once /readyz
// answers.
func (e *Env) startAPIFloor(ctx context.Context) (*floorServer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(e.Work, "api-floor.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(self, APIFloorCommand, e.PG.URLAs(CatalogRole, e.Catalog()), addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	child, err := proc.Start(cmd, syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	f := &floorServer{URL: "http://" + addr, child: child}
	if err := proc.WaitReady(ctx, f.URL+"/readyz", child, logPath, time.Minute); err != nil {
		child.Kill()
		return nil, fmt.Errorf("api floor server: %w", err)
	}
	return f, nil
}

// CPUSeconds returns the processor time the floor server has used.
func (f *floorServer) CPUSeconds() float64 {
	c, _ := proc.ProcessCPU(f.child.Pid)
	return c.Self
}

// Stop ends the floor server.
func (f *floorServer) Stop() { f.child.Stop(syscall.SIGTERM, 10*time.Second) }
