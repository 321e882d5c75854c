package fn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Run serves h as the kind its environment says, and does not return:
//
//   - AWS_LAMBDA_RUNTIME_API set (Lambda, or AWS's emulator): Lambda
//     invocations, through aws-lambda-go;
//   - CAIRN_FN_LISTEN set (an address, ":8080"): http calls, verified with
//     CAIRN_SIGNING_KEY (see NewHTTPHandler), until SIGTERM;
//   - otherwise one exec attempt (see RunExec), then exit with its status.
func Run(h Handler) {
	switch {
	case os.Getenv("AWS_LAMBDA_RUNTIME_API") != "":
		startLambda(h)
	case os.Getenv("CAIRN_FN_LISTEN") != "":
		if err := ListenAndServe(context.Background(), os.Getenv("CAIRN_FN_LISTEN"), h, nil); err != nil {
			fmt.Fprintf(os.Stderr, "cairn: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		os.Exit(RunExec(context.Background(), h, os.Stdin, os.Stdout, os.Stderr))
	}
}

// ListenAndServe serves h as an http function on addr until ctx ends or the
// process gets SIGTERM or SIGINT, then shuts down, letting running calls finish
// for up to 30 seconds.
func ListenAndServe(ctx context.Context, addr string, h Handler, cfg *HTTPConfig) error {
	handler, err := NewHTTPHandler(h, cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
