// Command cairn is Cairn's one binary: the server (serve, dev), migrations and the
// command-line client. main only wires the process to run.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cairn:", err)
		os.Exit(exitCode(err))
	}
}
