// Command bench runs Cairn's benchmark (`make bench`): a private PostgreSQL with
// durable settings and a versitygw, the scenarios against the built cairn binary,
// River and pgbench side by side; it prints a table and writes one JSON file per
// scenario. It never fails because the machine is slow: figures are printed beside
// their goals.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairnrun/cairn/bench/internal/runner"
	"github.com/cairnrun/cairn/bench/internal/scenario"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 3 && args[0] == scenario.APIFloorCommand {
		// The api scenario's floor server, started by the benchmark itself.
		return scenario.ServeAPIFloor(ctx, args[1], args[2])
	}
	cfg, err := runner.ParseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	return runner.Run(ctx, cfg, stdout, stderr)
}
