package fn

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidSignature is wrapped by VerifySignature's errors: a signature that
// is missing, malformed, wrong or outside the time tolerance.
var ErrInvalidSignature = errors.New("invalid signature")

// DefaultSignatureMaxSkew is VerifySignature's tolerance when it is given none.
const DefaultSignatureMaxSkew = 5 * time.Minute

// VerifySignature checks a Cairn-Signature header against the raw request body
// (docs/functions.md, "http: an endpoint"). Call it before decoding the body;
// NewHTTPHandler does.
//
// The scheme: the header is "t=<unix seconds>,v1=<hex>", where <hex> is the
// lower-case hex HMAC-SHA256, keyed with the shared signing key, of the string
// "<t>.<body>" (the timestamp as sent, a period, then the body's exact bytes).
// Several v1 entries may appear (key rotation); one must match. Unknown entries
// are ignored. The timestamp must be within maxSkew of the local clock either way
// (maxSkew ≤ 0 means DefaultSignatureMaxSkew), which bounds replays; the
// Idempotency-Key header is what makes a replayed call harmless.
//
// It returns nil when the signature is valid, else an error wrapping
// ErrInvalidSignature that never quotes the signature. It is safe for concurrent use.
func VerifySignature(key, header string, body []byte, maxSkew time.Duration) error {
	return VerifySignatureAt([]byte(key), header, body, maxSkew, time.Now())
}

// VerifySignatureAt is VerifySignature with the clock's reading given (now).
func VerifySignatureAt(key []byte, header string, body []byte, maxSkew time.Duration, now time.Time) error {
	if len(key) == 0 {
		return fmt.Errorf("verify signature: empty key: %w", ErrInvalidSignature)
	}
	if maxSkew <= 0 {
		maxSkew = DefaultSignatureMaxSkew
	}
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			if ts != "" {
				return fmt.Errorf("verify signature: two timestamps: %w", ErrInvalidSignature)
			}
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if ts == "" || len(sigs) == 0 {
		return fmt.Errorf("verify signature: header needs t= and v1=: %w", ErrInvalidSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(unix, 10) != ts {
		return fmt.Errorf("verify signature: bad timestamp %q: %w", ts, ErrInvalidSignature)
	}
	skew := now.Sub(time.Unix(unix, 0))
	if skew > maxSkew || skew < -maxSkew {
		return fmt.Errorf("verify signature: timestamp %d outside tolerance %s: %w", unix, maxSkew, ErrInvalidSignature)
	}
	want := Signature(key, unix, body)
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("verify signature: no matching v1 signature: %w", ErrInvalidSignature)
}

// Signature is the MAC of a Cairn-Signature's v1 entry: the HMAC-SHA256, keyed
// with key, of "<ts>.<body>".
func Signature(key []byte, ts int64, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}
