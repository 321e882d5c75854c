package client

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, header string
		want         time.Duration
	}{
		{name: "none", header: "", want: 0},
		{name: "seconds", header: "10", want: 10 * time.Second},
		{name: "spaces", header: " 2 ", want: 2 * time.Second},
		{name: "zero", header: "0", want: 0},
		{name: "negative", header: "-5", want: 0},
		{name: "capped", header: "86400", want: maxRetryAfter},
		{name: "huge", header: "99999999999999999999", want: 0},
		{name: "date", header: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second},
		{name: "date past", header: now.Add(-time.Minute).Format(http.TimeFormat), want: 0},
		{name: "garbage", header: "soon", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, parseRetryAfter(tt.header, now))
		})
	}
}
