package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOIDCFlagsCheck: `cairn serve` refuses, at start, an OIDC configuration
// that cannot work, naming the variable to set or fix.
func TestOIDCFlagsCheck(t *testing.T) {
	t.Parallel()
	const (
		issuer = "https://id.example.com"
		roles  = "groups:platform=admin"
		secret = "client-secret-0123456789"
	)
	for _, tc := range []struct {
		name      string
		f         oidcFlags
		publicURL string
		err       string
	}{
		{name: "off", f: oidcFlags{}},
		{name: "bearers", f: oidcFlags{issuer: issuer, roleMap: roles, audience: "cairn"}},
		{name: "sso", f: oidcFlags{issuer: issuer, roleMap: roles, clientID: "cairn", clientSecret: secret}, publicURL: "https://cairn.example.com"},
		{name: "sso with a redirect URL", f: oidcFlags{issuer: issuer, roleMap: roles, clientID: "cairn", clientSecret: secret, redirectURL: "https://cairn.example.com/ui/sso/callback"}},
		{name: "loopback http issuer", f: oidcFlags{issuer: "http://127.0.0.1:5556", roleMap: roles, audience: "cairn"}},
		{name: "no issuer", f: oidcFlags{audience: "cairn"}, err: "CAIRN_OIDC_AUDIENCE is set but CAIRN_OIDC_ISSUER is not"},
		{name: "http issuer", f: oidcFlags{issuer: "http://id.example.com", roleMap: roles, audience: "cairn"}, err: "want an https:// URL"},
		{name: "issuer only", f: oidcFlags{issuer: issuer, roleMap: roles}, err: "neither CAIRN_OIDC_CLIENT_ID"},
		{name: "no role map", f: oidcFlags{issuer: issuer, audience: "cairn"}, err: "CAIRN_OIDC_ROLE_MAP is not"},
		{name: "bad role map", f: oidcFlags{issuer: issuer, audience: "cairn", roleMap: "groups:dev=operator@Acme"}, err: `CAIRN_OIDC_ROLE_MAP: rule 1 (groups:dev=operator@Acme): namespace "Acme" must be`},
		{name: "empty role map", f: oidcFlags{issuer: issuer, audience: "cairn", roleMap: " , "}, err: "CAIRN_OIDC_ROLE_MAP has no rules"},
		{name: "no secret", f: oidcFlags{issuer: issuer, roleMap: roles, clientID: "cairn"}, publicURL: "https://c.example", err: "both CAIRN_OIDC_CLIENT_ID and CAIRN_OIDC_CLIENT_SECRET"},
		{name: "short secret", f: oidcFlags{issuer: issuer, roleMap: roles, clientID: "cairn", clientSecret: "short"}, publicURL: "https://c.example", err: "CAIRN_OIDC_CLIENT_SECRET is shorter than 16"},
		{name: "no public URL", f: oidcFlags{issuer: issuer, roleMap: roles, clientID: "cairn", clientSecret: secret}, err: "set CAIRN_PUBLIC_URL (or CAIRN_OIDC_REDIRECT_URL)"},
		{name: "bad redirect URL", f: oidcFlags{issuer: issuer, roleMap: roles, clientID: "cairn", clientSecret: secret, redirectURL: "https://c.example/callback"}, err: "must be an http(s) URL ending in /ui/sso/callback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.f.check(tc.publicURL)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}
