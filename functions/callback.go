package functions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Callbacks (docs/functions.md, "Completing later"): a function that starts work
// outside Cairn answers that it completes later, with the output {"$suspend":
// {"timeout": "24h"}}; its step then waits (suspended) until a third party POSTs
// the result to the envelope's callback_url, which carries a CallbackToken.

// SuspendKey is the one key of an output that suspends the step for a callback.
const SuspendKey = "$suspend"

// MaxSuspendTimeout bounds a $suspend's timeout: a year (366 days), as a wait's.
const MaxSuspendTimeout = 366 * 24 * time.Hour

// Suspend is what a function asks for with {"$suspend": {…}}.
type Suspend struct {
	// Timeout is how long the step waits for its callback; 0: forever.
	Timeout time.Duration
	// OnTimeout is fail (default: the step fails, code timeout) or continue (it
	// succeeds with a null output).
	OnTimeout string
}

// ParseSuspend reads an inline output: ok is false when it is not a $suspend (any
// other value, or an object with other keys too); err is set for a $suspend that
// is malformed (a bad timeout or on_timeout, unknown fields).
func ParseSuspend(output json.RawMessage) (s Suspend, ok bool, err error) {
	b := bytes.TrimSpace(output)
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"`+SuspendKey+`"`)) {
		return Suspend{}, false, nil
	}
	var outer map[string]json.RawMessage
	if json.Unmarshal(b, &outer) != nil || len(outer) != 1 || outer[SuspendKey] == nil {
		return Suspend{}, false, nil
	}
	var body struct {
		Timeout   string `json:"timeout"`
		OnTimeout string `json:"on_timeout"`
	}
	dec := json.NewDecoder(bytes.NewReader(outer[SuspendKey]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return Suspend{}, true, fmt.Errorf("$suspend: want {\"timeout\": \"24h\", \"on_timeout\": \"fail\"|\"continue\"}: %w", err)
	}
	if body.Timeout != "" {
		d, err := time.ParseDuration(body.Timeout)
		if err != nil || d <= 0 || d > MaxSuspendTimeout {
			return Suspend{}, true, fmt.Errorf("$suspend: timeout %q must be a duration > 0 and at most %s", body.Timeout, MaxSuspendTimeout)
		}
		s.Timeout = d
	}
	switch body.OnTimeout {
	case "", "fail", "continue":
		s.OnTimeout = body.OnTimeout
	default:
		return Suspend{}, true, fmt.Errorf("$suspend: on_timeout must be fail or continue, not %q", body.OnTimeout)
	}
	return s, true, nil
}

// CallbackToken is the credential of an attempt's callback URL
// (/v1/callbacks/<token>): run, step and attempt, signed like the lease credential
// (leaseMAC, with "callback:<attempt>" in the token's place, so that neither
// credential passes for the other). Form: "<run>.<step>.<attempt>.<hex MAC>".
func CallbackToken(key []byte, runID, step string, attempt int) string {
	a := strconv.Itoa(attempt)
	return runID + "." + step + "." + a + "." + leaseMAC(key, runID, step, "callback:"+a)
}

// ParseCallbackToken checks a callback token and returns its run, step and attempt;
// ErrBadCredential when it is malformed or not signed with key. Whether the step
// still waits for that attempt's callback is for the catalog to say.
func ParseCallbackToken(key []byte, token string) (runID uuid.UUID, step string, attempt int, err error) {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || len(key) == 0 {
		return uuid.Nil, "", 0, ErrBadCredential
	}
	runID, err = uuid.Parse(parts[0])
	if err != nil || runID.String() != parts[0] {
		return uuid.Nil, "", 0, ErrBadCredential
	}
	attempt, err = strconv.Atoi(parts[2])
	if err != nil || attempt <= 0 || strconv.Itoa(attempt) != parts[2] || parts[1] == "" {
		return uuid.Nil, "", 0, ErrBadCredential
	}
	if !hmacEqual(parts[3], leaseMAC(key, parts[0], parts[1], "callback:"+parts[2])) {
		return uuid.Nil, "", 0, ErrBadCredential
	}
	return runID, parts[1], attempt, nil
}

// callbackPath is where callback URLs point: callbackPath + a CallbackToken.
const callbackPath = "/v1/callbacks/"

// MaskCallbackPath returns a request path with the MAC of a callback token masked
// (/v1/callbacks/<run>.<step>.<attempt>.***), for logs and traces: the token is
// the credential that completes the step. Other paths are returned as they are.
func MaskCallbackPath(path string) string {
	token, ok := strings.CutPrefix(path, callbackPath)
	if !ok {
		return path
	}
	return callbackPath + token[:strings.LastIndexByte(token, '.')+1] + Mask
}
