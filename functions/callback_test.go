package functions

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestParseSuspend: only an object whose one key is $suspend, at the root of the
// output, suspends the step; a $suspend anywhere else is plain data.
func TestParseSuspend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		output  string
		ok      bool
		want    Suspend
		wantErr string
	}{
		{name: "timeout", output: `{"$suspend": {"timeout": "24h"}}`, ok: true, want: Suspend{Timeout: 24 * time.Hour}},
		{name: "no timeout", output: ` {"$suspend":{}} `, ok: true},
		{name: "continue", output: `{"$suspend": {"timeout": "1s", "on_timeout": "continue"}}`, ok: true,
			want: Suspend{Timeout: time.Second, OnTimeout: "continue"}},
		{name: "nested", output: `{"order": {"$suspend": {"timeout": "1h"}}}`},
		{name: "in a list", output: `[{"$suspend": {}}]`},
		{name: "with other keys", output: `{"$suspend": {}, "id": 1}`},
		{name: "a string", output: `"$suspend"`},
		{name: "not JSON", output: `{"$suspend": `},
		{name: "plain", output: `{"paid": true}`},
		{name: "bad timeout", output: `{"$suspend": {"timeout": "soon"}}`, ok: true, wantErr: "timeout"},
		{name: "negative", output: `{"$suspend": {"timeout": "-1h"}}`, ok: true, wantErr: "timeout"},
		{name: "over a year", output: `{"$suspend": {"timeout": "9000h"}}`, ok: true, wantErr: "timeout"},
		{name: "bad on_timeout", output: `{"$suspend": {"on_timeout": "retry"}}`, ok: true, wantErr: "on_timeout"},
		{name: "unknown field", output: `{"$suspend": {"timout": "1h"}}`, ok: true, wantErr: "unknown field"},
		{name: "not an object", output: `{"$suspend": "1h"}`, ok: true, wantErr: "$suspend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ok, err := ParseSuspend(json.RawMessage(tc.output))
			require.Equal(t, tc.ok, ok)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, s)
		})
	}
}

// TestCallbackToken: a token names its run, step and attempt; one signed with
// another key, for another step or attempt, altered in any way, or a lease
// credential is refused.
func TestCallbackToken(t *testing.T) {
	t.Parallel()
	key := []byte("callback-test-key-0123456789")
	run := uuid.New()
	token := CallbackToken(key, run.String(), "charge", 3)
	gotRun, step, attempt, err := ParseCallbackToken(key, token)
	require.NoError(t, err)
	require.Equal(t, run, gotRun)
	require.Equal(t, "charge", step)
	require.Equal(t, 3, attempt)

	bad := []string{
		CallbackToken([]byte("another-key-0123456789"), run.String(), "charge", 3),
		strings.Replace(token, ".charge.", ".other.", 1),
		strings.Replace(token, ".3.", ".4.", 1),
		strings.Replace(token, ".3.", ".03.", 1),
		strings.ToUpper(run.String()) + strings.TrimPrefix(token, run.String()),
		token + "0",
		token[:len(token)-2],
		LeaseCredential(key, run.String(), "charge", 3),
		"", "...", "a.b.c.d", run.String() + ".charge.0." + strings.Repeat("0", 64),
	}
	for _, b := range bad {
		_, _, _, err := ParseCallbackToken(key, b)
		require.ErrorIs(t, err, ErrBadCredential, "%q", b)
	}
	_, _, _, err = ParseCallbackToken(nil, token)
	require.ErrorIs(t, err, ErrBadCredential, "no key: no callbacks")
}

// FuzzParseCallbackToken: any text from the URL is refused or names what it was
// signed for; never a panic.
func FuzzParseCallbackToken(f *testing.F) {
	key := []byte("fuzz-key-0123456789")
	f.Add(CallbackToken(key, "01a22fab-4fd5-7547-ba9a-b7816555da45", "charge", 1))
	f.Add("01a22fab-4fd5-7547-ba9a-b7816555da45.charge.1.00")
	f.Add("x.y.z")
	f.Fuzz(func(t *testing.T, token string) {
		run, step, attempt, err := ParseCallbackToken(key, token)
		if err != nil {
			return
		}
		require.Equal(t, token, CallbackToken(key, run.String(), step, attempt))
	})
}

// FuzzParseSuspend: any output parses or not, never a panic; a $suspend's timeout
// stays within its bounds.
func FuzzParseSuspend(f *testing.F) {
	f.Add([]byte(`{"$suspend": {"timeout": "24h"}}`))
	f.Add([]byte(`{"$suspend": {"on_timeout": "continue"}}`))
	f.Add([]byte(`{"a": {"$suspend": {}}}`))
	f.Fuzz(func(t *testing.T, output []byte) {
		s, ok, err := ParseSuspend(output)
		if ok && err == nil {
			require.GreaterOrEqual(t, s.Timeout, time.Duration(0))
			require.LessOrEqual(t, s.Timeout, MaxSuspendTimeout)
		}
	})
}

// TestMaskCallbackPath: the access log and traces show a callback request's
// run, step and attempt, never the MAC that makes its token a credential.
func TestMaskCallbackPath(t *testing.T) {
	t.Parallel()
	token := CallbackToken([]byte("k"), "01a24a62-57c7-79f5-b117-76866557d027", "talk", 2)
	mac := token[strings.LastIndexByte(token, '.')+1:]
	got := MaskCallbackPath("/v1/callbacks/" + token)
	require.Equal(t, "/v1/callbacks/01a24a62-57c7-79f5-b117-76866557d027.talk.2.***", got)
	require.NotContains(t, got, mac)
	require.Equal(t, "/v1/callbacks/***", MaskCallbackPath("/v1/callbacks/garbage"))
	require.Equal(t, "/v1/runs/x", MaskCallbackPath("/v1/runs/x"))
}
