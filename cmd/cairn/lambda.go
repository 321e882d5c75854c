package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"

	"github.com/cairnrun/cairn/functions"
)

// newLambdaInvoker builds the invoker of lambda steps from the environment:
//
//   - CAIRN_LAMBDA_ENDPOINT: the Lambda API's URL (LocalStack:
//     http://localstack:4566); default AWS_ENDPOINT_URL_LAMBDA, then the SDK's
//     own resolution (AWS_ENDPOINT_URL, then AWS).
//   - AWS_REGION, then AWS_DEFAULT_REGION: the region. Without one, lambda steps
//     are not served by this process (their attempts fail, retryably, with "no
//     lambda invoker is configured"): a debug line says so, or a warning when
//     CAIRN_LAMBDA_ENDPOINT asks for Lambda explicitly.
//   - AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN: static
//     credentials; without them the SDK's default chain (shared files, container
//     or instance role).
//   - CAIRN_LAMBDA_EMULATOR=true: the endpoint is AWS's Runtime Interface
//     Emulator (aws-lambda-rie), which runs one function locally
//     (functions.LambdaConfig.Emulator); it needs CAIRN_LAMBDA_ENDPOINT, and
//     the region and credentials may then be left out.
//
// It returns a nil Invoker when Lambda is not configured (a nil interface, not a
// nil *functions.Lambda, so the dispatcher sees no invoker), and an error when
// the configuration is unusable. The AWS configuration itself is loaded at the
// first lambda attempt (functions.NewLambda: the region is always given here).
func newLambdaInvoker(ctx context.Context, e env, logger *slog.Logger) (functions.Invoker, error) {
	endpoint := e.or("CAIRN_LAMBDA_ENDPOINT", e("AWS_ENDPOINT_URL_LAMBDA"))
	region := e.or("AWS_REGION", e("AWS_DEFAULT_REGION"))
	emulator := false
	if v := e("CAIRN_LAMBDA_EMULATOR"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("CAIRN_LAMBDA_EMULATOR=%q: want true or false", v)
		}
		emulator = b
	}
	if region == "" && emulator {
		region = "us-east-1" // what the emulator reports; it checks none
	}
	if region == "" {
		if e("CAIRN_LAMBDA_ENDPOINT") != "" {
			logger.Warn("CAIRN_LAMBDA_ENDPOINT is set but no AWS_REGION: lambda steps will not run on this server")
		} else {
			logger.Debug("no AWS_REGION or AWS_DEFAULT_REGION: lambda steps will not run on this server")
		}
		return nil, nil
	}
	l, err := functions.NewLambda(ctx, &functions.LambdaConfig{
		Endpoint:     endpoint,
		Region:       region,
		AccessKey:    e("AWS_ACCESS_KEY_ID"),
		SecretKey:    e("AWS_SECRET_ACCESS_KEY"),
		SessionToken: e("AWS_SESSION_TOKEN"),
		Emulator:     emulator,
		Logger:       logger,
	})
	if err != nil {
		return nil, fmt.Errorf("lambda (CAIRN_LAMBDA_ENDPOINT, AWS_REGION, AWS credentials): %w", err)
	}
	where := "aws"
	if u, err := url.Parse(endpoint); err == nil && endpoint != "" {
		where = u.Redacted()
	}
	if emulator {
		where += " (runtime interface emulator)"
	}
	logger.Info("lambda steps enabled", "region", region, "endpoint", where)
	return l, nil
}
