package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cairnrun/cairn/bundle"
)

// FuzzVerifySignature feeds arbitrary signature headers and bodies to every
// signature style: none panics, and a header that verifies is one made with the
// secret (an attacker's header never does, short of a MAC forgery).
func FuzzVerifySignature(f *testing.F) {
	secret := []byte("fuzz-secret")
	now := time.Unix(1_700_000_000, 0)
	mac := func(msg string) string {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(msg))
		return hex.EncodeToString(m.Sum(nil))
	}
	body := `{"id":"evt_1"}`
	f.Add("sha256="+mac(body), body)
	f.Add(fmt.Sprintf("t=%d,v1=%s", now.Unix(), mac(fmt.Sprint(now.Unix())+"."+body)), body)
	f.Add("t=,v1=,v1=zz,,=,t=1e9", "")
	f.Add("sha256=", "x")
	f.Fuzz(func(t *testing.T, header, body string) {
		for _, style := range bundle.Signatures {
			h := http.Header{}
			for _, name := range []string{headerCairnSignature, headerGitHubSignature, headerStripeSignature} {
				h.Set(name, header)
			}
			if verifySignature(style, []byte("another secret"), []byte(body), h, now) == nil && header != "" {
				t.Fatalf("%s: a header made without the secret verified: %q", style, header)
			}
			_ = verifySignature(style, secret, []byte(body), h, now)
		}
	})
}
