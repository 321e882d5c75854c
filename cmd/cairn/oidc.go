package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/ui"
)

// oidcFlags configure OpenID Connect (docs/security.md, "Single sign-on and OIDC
// bearers"): single sign-on for the web UI when a client is given, JWT bearers
// for the API when an audience is given.
type oidcFlags struct {
	issuer, clientID, clientSecret string
	roleMap, audience              string
	redirectURL, scopes            string
}

func (f *oidcFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.issuer, "oidc-issuer", "", "OpenID provider's issuer URL (https; http only on loopback), exactly as its tokens' iss: turns on single sign-on (with --oidc-client-id) and/or OIDC bearers (with --oidc-audience)")
	fs.StringVar(&f.clientID, "oidc-client-id", "", "Cairn's client ID at the provider, for \"Sign in with SSO\" in the web UI")
	fs.StringVar(&f.clientSecret, "oidc-client-secret", "", "that client's secret (at least 16 characters; the same on every server: it also keys the SSO cookies)")
	fs.StringVar(&f.roleMap, "oidc-role-map", "", "roles from claims: claim:value=role[@*],... (groups:platform=admin,groups:acme-dev=operator); the highest matching rule wins, no match is refused")
	fs.StringVar(&f.audience, "oidc-audience", "", "the aud an OIDC JWT bearer must hold for the API to accept it")
	fs.StringVar(&f.redirectURL, "oidc-redirect-url", "", "where the provider sends browsers back (default <--public-url>/ui/sso/callback; register it at the provider)")
	fs.StringVar(&f.scopes, "oidc-scopes", "openid profile email", "scopes single sign-on asks for, space-separated (add the one your provider wants for a groups claim, if any)")
	bindEnv(fs, map[string]string{
		"oidc-issuer":        "CAIRN_OIDC_ISSUER",
		"oidc-client-id":     "CAIRN_OIDC_CLIENT_ID",
		"oidc-client-secret": "CAIRN_OIDC_CLIENT_SECRET",
		"oidc-role-map":      "CAIRN_OIDC_ROLE_MAP",
		"oidc-audience":      "CAIRN_OIDC_AUDIENCE",
		"oidc-redirect-url":  "CAIRN_OIDC_REDIRECT_URL",
		"oidc-scopes":        "CAIRN_OIDC_SCOPES",
	})
}

// oidcSetup is what oidcFlags turn on: either may be nil.
type oidcSetup struct {
	bearers *api.OIDCBearers
	sso     *ui.SSOConfig
}

// check refuses an OIDC configuration that cannot work, naming the variable;
// publicURL is --public-url as given ("" when unset).
func (f *oidcFlags) check(publicURL string) (*api.RoleMap, error) {
	if f.issuer == "" {
		for name, v := range map[string]string{"CAIRN_OIDC_CLIENT_ID": f.clientID, "CAIRN_OIDC_CLIENT_SECRET": f.clientSecret,
			"CAIRN_OIDC_ROLE_MAP": f.roleMap, "CAIRN_OIDC_AUDIENCE": f.audience, "CAIRN_OIDC_REDIRECT_URL": f.redirectURL} {
			if v != "" {
				return nil, fmt.Errorf("%s is set but CAIRN_OIDC_ISSUER is not", name)
			}
		}
		return nil, nil
	}
	u, err := url.Parse(f.issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname()))) {
		return nil, fmt.Errorf("CAIRN_OIDC_ISSUER %q: want an https:// URL (http:// only on a loopback address)", f.issuer)
	}
	if f.clientID == "" && f.audience == "" {
		return nil, errors.New("CAIRN_OIDC_ISSUER is set but neither CAIRN_OIDC_CLIENT_ID (single sign-on for the web UI) nor CAIRN_OIDC_AUDIENCE (OIDC bearers for the API)")
	}
	if (f.clientID == "") != (f.clientSecret == "") {
		return nil, errors.New("single sign-on needs both CAIRN_OIDC_CLIENT_ID and CAIRN_OIDC_CLIENT_SECRET")
	}
	if f.roleMap == "" {
		return nil, errors.New("CAIRN_OIDC_ISSUER is set but CAIRN_OIDC_ROLE_MAP is not: it decides every OIDC identity's role (groups:platform=admin,...)")
	}
	roles, err := api.ParseRoleMap(f.roleMap)
	if err != nil {
		return nil, fmt.Errorf("CAIRN_OIDC_ROLE_MAP: %w", err)
	}
	if roles.Len() == 0 {
		return nil, errors.New("CAIRN_OIDC_ROLE_MAP has no rules")
	}
	if f.clientID != "" {
		if f.redirectURL == "" && publicURL == "" {
			return nil, errors.New("single sign-on needs the URL browsers reach Cairn at: set CAIRN_PUBLIC_URL (or CAIRN_OIDC_REDIRECT_URL)")
		}
		if err := ui.CheckSSOConfig(f.ssoConfig(publicURL, roles)); err != nil {
			return nil, err
		}
	}
	return roles, nil
}

func (f *oidcFlags) ssoConfig(publicURL string, roles *api.RoleMap) *ui.SSOConfig {
	redirect := f.redirectURL
	if redirect == "" {
		redirect = strings.TrimSuffix(publicURL, "/") + "/ui/sso/callback"
	}
	return &ui.SSOConfig{Issuer: f.issuer, ClientID: f.clientID, ClientSecret: f.clientSecret, RedirectURL: redirect,
		Scopes: strings.Fields(strings.ReplaceAll(f.scopes, ",", " ")), Roles: roles}
}

// setup checks the flags and builds what they turn on; bearers try the
// provider's discovery once (a failure is logged, and retried on use).
func (f *oidcFlags) setup(ctx context.Context, publicURL string, logger *slog.Logger) (oidcSetup, error) {
	roles, err := f.check(publicURL)
	if err != nil || roles == nil {
		return oidcSetup{}, err
	}
	var out oidcSetup
	if f.audience != "" {
		if out.bearers, err = api.NewOIDCBearers(ctx, api.OIDCConfig{Issuer: f.issuer, Audience: f.audience, Roles: roles, Logger: logger}); err != nil {
			return oidcSetup{}, err
		}
		logger.Info("OIDC bearers accepted", "issuer", f.issuer, "audience", f.audience)
	}
	if f.clientID != "" {
		out.sso = f.ssoConfig(publicURL, roles)
		logger.Info("single sign-on for the web UI", "issuer", f.issuer, "redirect_url", out.sso.RedirectURL)
	}
	return out, nil
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
