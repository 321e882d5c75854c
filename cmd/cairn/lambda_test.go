package main

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/functions"
)

func TestNewLambdaInvoker(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		vars    map[string]string
		enabled bool
		err     string
		log     string
	}{
		{name: "no region", vars: map[string]string{}, log: "level=DEBUG"},
		{name: "endpoint without region", vars: map[string]string{"CAIRN_LAMBDA_ENDPOINT": "http://localstack:4566"}, log: "level=WARN"},
		{
			name: "localstack",
			vars: map[string]string{
				"CAIRN_LAMBDA_ENDPOINT": "http://localstack:4566", "AWS_REGION": "us-east-1",
				"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
			},
			enabled: true,
			log:     "endpoint=http://localstack:4566",
		},
		{
			name:    "default region variable",
			vars:    map[string]string{"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
			enabled: true,
			log:     "region=eu-west-1",
		},
		{
			name: "bad endpoint",
			vars: map[string]string{"CAIRN_LAMBDA_ENDPOINT": "localstack:4566", "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
			err:  "must be an absolute http or https URL",
		},
		{
			name:    "emulator",
			vars:    map[string]string{"CAIRN_LAMBDA_ENDPOINT": "http://127.0.0.1:9000", "CAIRN_LAMBDA_EMULATOR": "true"},
			enabled: true,
			log:     "endpoint=\"http://127.0.0.1:9000 (runtime interface emulator)\"",
		},
		{
			name: "emulator without endpoint",
			vars: map[string]string{"CAIRN_LAMBDA_EMULATOR": "true"},
			err:  "the emulator needs an endpoint",
		},
		{
			name: "emulator not a boolean",
			vars: map[string]string{"CAIRN_LAMBDA_ENDPOINT": "http://127.0.0.1:9000", "CAIRN_LAMBDA_EMULATOR": "yes"},
			err:  "CAIRN_LAMBDA_EMULATOR",
		},
		{
			name: "half credentials",
			vars: map[string]string{"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "a"},
			err:  "access key and secret key go together",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			inv, err := newLambdaInvoker(context.Background(), func(k string) string { return tt.vars[k] }, logger)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			if tt.enabled {
				require.IsType(t, (*functions.Lambda)(nil), inv)
			} else {
				// A nil interface: the dispatcher's "no invoker" check must see it.
				require.True(t, inv == nil)
			}
			require.Contains(t, logs.String(), tt.log)
		})
	}
}
