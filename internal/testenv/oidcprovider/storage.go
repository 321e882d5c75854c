package oidcprovider

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The storage implements op.Storage, and the client credentials grant.
var (
	_ op.Storage                   = (*storage)(nil)
	_ op.ClientCredentialsStorage  = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest = (*storage)(nil)
)

// authRequest is one sign-in under way (op.AuthRequest).
type authRequest struct {
	id       string
	req      oidc.AuthRequest
	userID   string
	done     bool
	authTime time.Time
}

func (a *authRequest) GetID() string          { return a.id }
func (a *authRequest) GetACR() string         { return "" }
func (a *authRequest) GetAMR() []string       { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string  { return []string{a.req.ClientID} }
func (a *authRequest) GetAuthTime() time.Time { return a.authTime }
func (a *authRequest) GetClientID() string    { return a.req.ClientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.req.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.req.CodeChallenge, Method: a.req.CodeChallengeMethod}
}
func (a *authRequest) GetNonce() string                   { return a.req.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.req.RedirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.req.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.req.ResponseMode }
func (a *authRequest) GetScopes() []string                { return a.req.Scopes }
func (a *authRequest) GetState() string                   { return a.req.State }
func (a *authRequest) GetSubject() string                 { return a.userID }
func (a *authRequest) Done() bool                         { return a.done }

// ccRequest is a client credentials grant's token request (op.TokenRequest).
type ccRequest struct {
	w      Workload
	scopes []string
}

func (c *ccRequest) GetSubject() string    { return c.w.Subject }
func (c *ccRequest) GetAudience() []string { return c.w.Audience }
func (c *ccRequest) GetScopes() []string   { return c.scopes }

// accessToken is an issued access token's record, for userinfo.
type accessToken struct {
	subject string
	expires time.Time
}

// client is a WebClient or a Workload as op sees it (op.Client).
type client struct {
	id           string
	redirectURIs []string
	workload     bool
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return c.redirectURIs }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	if c.workload {
		return []oidc.GrantType{oidc.GrantTypeClientCredentials}
	}
	return []oidc.GrantType{oidc.GrantTypeCode}
}
func (c *client) LoginURL(id string) string { return "/login?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType {
	if c.workload {
		return op.AccessTokenTypeJWT
	}
	return op.AccessTokenTypeBearer
}
func (c *client) IDTokenLifetime() time.Duration { return time.Hour }

// DevMode lets a web client's redirect URIs be http:// (the tests' servers).
func (c *client) DevMode() bool { return true }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) IsScopeAllowed(string) bool { return true }

// IDTokenUserinfoClaimsAssertion puts the user's claims (groups) in the ID
// token, as most providers do for a groups claim they are told to send.
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }

func (s *storage) findClient(id string) (*client, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		if c.ID == id {
			return &client{id: c.ID, redirectURIs: c.RedirectURIs}, c.Secret, true
		}
	}
	for _, w := range s.workloads {
		if w.ID == id {
			return &client{id: w.ID, workload: true}, w.Secret, true
		}
	}
	return nil, "", false
}

// GetClientByClientID implements op.OPStorage.
func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, _, ok := s.findClient(id)
	if !ok {
		return nil, errNotFound
	}
	return c, nil
}

// AuthorizeClientIDSecret implements op.OPStorage.
func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	_, want, ok := s.findClient(id)
	if !ok || want != secret {
		return errors.New("wrong client or secret")
	}
	return nil
}

// ClientCredentials implements op.ClientCredentialsStorage.
func (s *storage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	if err := s.AuthorizeClientIDSecret(ctx, id, secret); err != nil {
		return nil, err
	}
	return s.GetClientByClientID(ctx, id)
}

// ClientCredentialsTokenRequest implements op.ClientCredentialsStorage.
func (s *storage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	w, ok := s.workload(id)
	if !ok {
		return nil, errNotFound
	}
	if w.Subject == "" {
		w.Subject = w.ID
	}
	if len(w.Audience) == 0 {
		w.Audience = []string{w.ID}
	}
	return &ccRequest{w: w, scopes: scopes}, nil
}

// CreateAuthRequest implements op.AuthStorage.
func (s *storage) CreateAuthRequest(_ context.Context, req *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	a := &authRequest{id: rand.Text(), req: *req}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[a.id] = a
	return a, nil
}

// AuthRequestByID implements op.AuthStorage.
func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.requests[id]
	if !ok {
		return nil, errNotFound
	}
	return a, nil
}

// AuthRequestByCode implements op.AuthStorage.
func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, errNotFound
	}
	return s.AuthRequestByID(ctx, id)
}

// SaveAuthCode implements op.AuthStorage.
func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

// DeleteAuthRequest implements op.AuthStorage: a code is used once.
func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

// CreateAccessToken implements op.AuthStorage. A workload's token lives its
// Lifetime (negative: it is born expired), a user's 5 minutes.
func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	life := 5 * time.Minute
	if cc, ok := req.(*ccRequest); ok && cc.w.Lifetime != 0 {
		life = cc.w.Lifetime
	}
	id, exp := rand.Text(), time.Now().Add(life)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[id] = &accessToken{subject: req.GetSubject(), expires: exp}
	return id, exp, nil
}

// CreateAccessAndRefreshTokens implements op.AuthStorage: no refresh tokens here.
func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("refresh tokens are not supported")
}

// TokenRequestByRefreshToken implements op.AuthStorage.
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

// TerminateSession implements op.AuthStorage.
func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

// RevokeToken implements op.AuthStorage.
func (s *storage) RevokeToken(_ context.Context, id, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, id)
	return nil
}

// GetRefreshTokenInfo implements op.AuthStorage.
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

// rsaKey is a signing key as op sees it (op.SigningKey and op.Key).
type rsaKey struct{ k signingKey }

func (r rsaKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (r rsaKey) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (r rsaKey) Use() string                                 { return "sig" }
func (r rsaKey) ID() string                                  { return r.k.id }

// Key is the private key for signing (SigningKey) but the public one in the
// key set (Key): the storage hands the same type to both, so keySet wraps it.
func (r rsaKey) Key() any { return r.k.key }

type publicKey struct{ rsaKey }

func (p publicKey) Key() any { return &p.k.key.PublicKey }

// SigningKey implements op.AuthStorage: the newest key.
func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rsaKey{s.keys[len(s.keys)-1]}, nil
}

// SignatureAlgorithms implements op.AuthStorage.
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

// KeySet implements op.AuthStorage: the public keys the JWKS publishes.
func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keySets++
	out := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, publicKey{rsaKey{k}})
	}
	return out, nil
}

// SetUserinfoFromScopes implements op.OPStorage (deprecated there: see
// SetUserinfoFromRequest).
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest implements op.CanSetUserinfoFromRequest: the ID token's claims.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	return s.fillUserinfo(info, req.GetSubject())
}

// SetUserinfoFromToken implements op.OPStorage: the userinfo endpoint's answer.
func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, _, _ string) error {
	s.mu.Lock()
	tok, ok := s.tokens[tokenID]
	s.mu.Unlock()
	if !ok || time.Now().After(tok.expires) {
		return errors.New("token is not valid")
	}
	return s.fillUserinfo(info, tok.subject)
}

func (s *storage) fillUserinfo(info *oidc.UserInfo, subject string) error {
	u, ok := s.user(subject)
	if !ok {
		return errNotFound
	}
	info.Subject = u.ID
	info.PreferredUsername = u.Username
	info.Email, info.EmailVerified = u.Email, u.Email != ""
	for k, v := range u.Claims {
		info.AppendClaims(k, v)
	}
	return nil
}

// SetIntrospectionFromToken implements op.OPStorage: not offered.
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("introspection is not supported")
}

// GetPrivateClaimsFromScopes implements op.OPStorage: a workload's claims go
// into its JWT access tokens.
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, subject, clientID string, _ []string) (map[string]any, error) {
	w, ok := s.workload(clientID)
	if !ok {
		return nil, nil
	}
	return w.Claims, nil
}

// GetKeyByIDAndClientID implements op.OPStorage: no JWT profile clients.
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotFound
}

// ValidateJWTProfileScopes implements op.OPStorage.
func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

// Health implements op.Storage.
func (s *storage) Health(context.Context) error { return nil }

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

func decodeJSON(resp *http.Response, out any) error { return json.NewDecoder(resp.Body).Decode(out) }
