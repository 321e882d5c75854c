package functions

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// ErrBadCredential means a lease credential is malformed or its signature is wrong.
var ErrBadCredential = errors.New("invalid lease credential")

// LeaseCredential is what an http or lambda handler presents as the bearer token of
// PUT /v1/runs/{id}/steps/{key}/checkpoint: the attempt's fencing token, signed with
// the servers' shared key so it cannot be guessed from the (monotonic) token alone.
// Form: "<token>.<hex HMAC-SHA256(key, run_id "/" step "/" token)>".
func LeaseCredential(key []byte, runID, step string, token int64) string {
	t := strconv.FormatInt(token, 10)
	return t + "." + leaseMAC(key, runID, step, t)
}

// ParseLeaseCredential checks a credential for a run's step and returns its fencing
// token; ErrBadCredential if it is malformed or not signed with key. Whether the lease
// is still current is for the catalog to say.
func ParseLeaseCredential(key []byte, runID, step, cred string) (int64, error) {
	t, mac, ok := strings.Cut(cred, ".")
	if !ok || len(key) == 0 {
		return 0, ErrBadCredential
	}
	token, err := strconv.ParseInt(t, 10, 64)
	if err != nil || token <= 0 {
		return 0, ErrBadCredential
	}
	if !hmacEqual(mac, leaseMAC(key, runID, step, t)) {
		return 0, ErrBadCredential
	}
	return token, nil
}

// hmacEqual compares a MAC given with the one computed, in constant time.
func hmacEqual(given, want string) bool {
	return hmac.Equal([]byte(given), []byte(want))
}

func leaseMAC(key []byte, runID, step, token string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(runID + "/" + step + "/" + token))
	return hex.EncodeToString(m.Sum(nil))
}
