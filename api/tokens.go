package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
)

// Managed tokens (POST /v1/tokens, docs/security.md "Managed tokens") live in the
// catalog, beside the static ones of CAIRN_TOKENS (the break-glass path, which
// authMiddleware reads first). A managed token's value is "cairn_" and 43
// characters of base64url: 256 random bits. The catalog keeps its SHA-256 only.
// A plain, unsalted, fast hash is enough here: the value is not a password a
// person chose but 256 random bits, so no dictionary or brute force can find a
// value from its hash, however fast the hash, and every request can be checked
// with one lookup by hash (no per-token salt to try).

const (
	// managedTokenPrefix begins every managed token: only such tokens are
	// looked up in the catalog (and secret scanners can tell them).
	managedTokenPrefix = "cairn_"
	// tokenCacheMax bounds the cache; past it, the cache starts empty again.
	tokenCacheMax = 10_000
)

// TokenCacheTTL is how long a server trusts what it read of a managed token: a
// revocation reaches every server within it (plus one lookup). Expiry is checked
// against the cached expires_at on every request, so it takes effect at once.
const TokenCacheTTL = 500 * time.Millisecond

// errTokenRevoked and tokenExpiredError are what a managed token that no longer
// works is refused with (401, with a detail saying which; TokenRefused).
var errTokenRevoked = errors.New("the bearer token was revoked")

type tokenExpiredError struct{ at time.Time }

func (e *tokenExpiredError) Error() string {
	return "the bearer token expired at " + e.at.UTC().Format(time.RFC3339)
}

// TokenRefused reports whether err (of Server.IdentifyHash) refuses a known
// token: it expired or was revoked (the error says which). Other errors are the
// catalog's.
func TokenRefused(err error) bool {
	var expired *tokenExpiredError
	return errors.Is(err, errTokenRevoked) || errors.As(err, &expired)
}

// IdentifyHash returns who the token whose TokenHash is h is: one of
// Config.Tokens, or a managed token (read as requests read it: at most
// TokenCacheTTL stale); the zero Identity for an unknown token; an error
// TokenRefused reports for an expired or revoked one, or the catalog's. The web UI
// checks its sessions' tokens with it.
func (s *Server) IdentifyHash(ctx context.Context, h [32]byte) (Identity, error) {
	if who := s.cfg.Tokens.IdentifyHash(h); who.Role != RoleNone {
		return who, nil
	}
	return s.managed.identifyHash(ctx, h)
}

// managedTokens identifies managed tokens by their hash, through a cache of at
// most TokenCacheTTL: one catalog lookup per token and server every
// TokenCacheTTL at most, however many requests; that lookup also notes the use
// (catalog.Store.TokenLookup). No LISTEN: it works through a transaction-mode
// pooler. It is safe for concurrent use.
type managedTokens struct {
	store *catalog.Store
	mu    sync.Mutex
	cache map[[32]byte]cachedToken
}

type cachedToken struct {
	tok *catalog.Token // nil: no such token
	at  time.Time      // when the lookup began
}

// identify returns who token is, the zero Identity for a token that is not a
// managed one; errTokenRevoked or a *tokenExpiredError for one that no longer
// works; the catalog's error when it cannot be read.
func (m *managedTokens) identify(ctx context.Context, token string) (Identity, error) {
	if !strings.HasPrefix(token, managedTokenPrefix) {
		return Identity{}, nil
	}
	return m.identifyHash(ctx, TokenHash(token))
}

// identifyHash is identify by the token's hash.
func (m *managedTokens) identifyHash(ctx context.Context, h [32]byte) (Identity, error) {
	if m.store == nil {
		return Identity{}, nil
	}
	now := time.Now()
	m.mu.Lock()
	c, ok := m.cache[h]
	m.mu.Unlock()
	if !ok || now.Sub(c.at) >= TokenCacheTTL {
		tok, err := m.store.TokenLookup(ctx, h[:])
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return Identity{}, err
		}
		c = cachedToken{tok: tok, at: now}
		m.mu.Lock()
		if m.cache == nil || len(m.cache) >= tokenCacheMax {
			m.cache = map[[32]byte]cachedToken{}
		}
		m.cache[h] = c
		m.mu.Unlock()
	}
	switch t := c.tok; {
	case t == nil:
		return Identity{}, nil
	case t.RevokedAt != nil:
		return Identity{}, errTokenRevoked
	case t.ExpiresAt != nil && !time.Now().Before(*t.ExpiresAt):
		return Identity{}, &tokenExpiredError{at: *t.ExpiresAt}
	}
	role, err := ParseRole(c.tok.Role)
	if err != nil {
		return Identity{}, nil // the catalog's check allows no other role
	}
	who := Identity{Role: role, Name: c.tok.Name}
	if c.tok.Namespace != nil {
		who.Namespace = *c.tok.Namespace
	}
	return who, nil
}

// identifyManaged is authMiddleware's seam to managed tokens: it writes the 401 or
// 503 of a token that is refused (and returns false), or returns who token is
// (the zero Identity for an unknown token).
func (s *Server) identifyManaged(ctx huma.Context, token string) (Identity, bool) {
	who, err := s.managed.identify(ctx.Context(), token)
	switch {
	case err == nil:
		return who, true
	case TokenRefused(err):
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="cairn", error="invalid_token"`)
		_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, err.Error())
	default:
		p := s.problemFor(ctx.Context(), err)
		_ = huma.WriteErr(s.api, ctx, p.Status, p.Detail)
	}
	return Identity{}, false
}

// newTokenValue returns a new managed token's value.
func newTokenValue() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return managedTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// APIToken is a managed token as the API shows it: never its value, but once.
type APIToken struct {
	ID         string     `json:"id" doc:"the token's ID (DELETE /v1/tokens/{id})"`
	Name       string     `json:"name" doc:"the actor its requests are recorded under"`
	Role       string     `json:"role" enum:"viewer,operator,admin"`
	Namespace  *string    `json:"namespace,omitempty" doc:"the one namespace it acts in; absent: every namespace"`
	CreatedAt  time.Time  `json:"created_at"`
	CreatedBy  string     `json:"created_by" doc:"the name of the token that created it"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty" doc:"when it stops working; absent: never"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty" doc:"when it was revoked; absent: it was not"`
	RevokedBy  *string    `json:"revoked_by,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty" doc:"when a request last used it, at most a minute stale; absent: never"`
}

func apiTokenOf(t *catalog.Token) APIToken {
	return APIToken{ID: t.ID.String(), Name: t.Name, Role: t.Role, Namespace: t.Namespace, CreatedAt: t.CreatedAt.UTC(), CreatedBy: t.CreatedBy,
		ExpiresAt: utc(t.ExpiresAt), RevokedAt: utc(t.RevokedAt), RevokedBy: t.RevokedBy, LastUsedAt: utc(t.LastUsedAt)}
}

// CreateTokenBody is the body of POST /v1/tokens.
type CreateTokenBody struct {
	Name      string     `json:"name" pattern:"^[A-Za-z0-9][A-Za-z0-9._@-]*$" maxLength:"63" doc:"the actor its requests are recorded under (audit log, events)"`
	Role      string     `json:"role" enum:"viewer,operator,admin"`
	ExpiresAt *time.Time `json:"expires_at,omitempty" doc:"when it stops working (RFC 3339, in the future); absent: never"`
	Namespace string     `json:"namespace,omitempty" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"31" doc:"the one namespace it acts in (it must exist); absent: every namespace"`
}

// CreatedToken is a new token with its value: the only time the value is shown.
type CreatedToken struct {
	APIToken
	Value string `json:"value" doc:"the bearer token: shown this once, stored only as its SHA-256"`
}

func (s *Server) registerTokens() {
	register(s, everyNamespace(huma.Operation{
		OperationID:   "createToken",
		Method:        http.MethodPost,
		Path:          "/v1/tokens",
		Summary:       "Create a token",
		Description:   "A new managed bearer token with a name and a role. Its value is in this answer only: the catalog keeps its SHA-256. It works on every server at once, until it expires or is revoked (DELETE /v1/tokens/{id}; every server refuses it within a second).",
		Tags:          []string{"tokens"},
		DefaultStatus: http.StatusCreated,
	}), RoleAdmin, nil, func(ctx context.Context, in *struct{ Body CreateTokenBody }) (*struct{ Body CreatedToken }, error) {
		if in.Body.ExpiresAt != nil && !in.Body.ExpiresAt.After(time.Now()) {
			return nil, classValidationFailed.problem("expires_at is past",
				&huma.ErrorDetail{Location: "body.expires_at", Value: in.Body.ExpiresAt, Message: "must be in the future"})
		}
		var ns *string
		if in.Body.Namespace != "" {
			if _, err := s.store.NamespaceGet(ctx, in.Body.Namespace); err != nil {
				if errors.Is(err, catalog.ErrNotFound) {
					return nil, classValidationFailed.problem("no such namespace",
						&huma.ErrorDetail{Location: "body.namespace", Value: in.Body.Namespace, Message: "create the namespace first (POST /v1/namespaces)"})
				}
				return nil, err
			}
			ns = &in.Body.Namespace
		}
		value := newTokenValue()
		h := TokenHash(value)
		t, err := s.store.TokenCreate(ctx, catalog.TokenCreateParams{Name: in.Body.Name, Role: in.Body.Role, Hash: h[:],
			CreatedBy: actor(ctx), ExpiresAt: in.Body.ExpiresAt, Namespace: ns})
		if err != nil {
			return nil, err
		}
		return &struct{ Body CreatedToken }{Body: CreatedToken{APIToken: apiTokenOf(t), Value: value}}, nil
	})

	register(s, everyNamespace(huma.Operation{
		OperationID: "listTokens",
		Method:      http.MethodGet,
		Path:        "/v1/tokens",
		Summary:     "List tokens",
		Description: "The managed tokens, newest first, never their values (the tokens of CAIRN_TOKENS are not listed).",
		Tags:        []string{"tokens"},
	}), RoleAdmin, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct {
		Revoked bool `query:"revoked" doc:"include revoked tokens"`
		PageParams
	}) (*listOutput[APIToken], error) {
		filter := fmt.Sprint(in.Revoked)
		var before uuid.UUID
		if err := s.decodeCursor(in.Cursor, "tokens", filter, &before); err != nil {
			return nil, err
		}
		rows, err := s.store.TokenList(ctx, catalog.TokenListParams{Before: before, Revoked: in.Revoked, Limit: in.Limit + 1})
		if err != nil {
			return nil, err
		}
		out := &listOutput[APIToken]{}
		out.Body.Items = make([]APIToken, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("tokens", filter, rows[i-1].ID)
				break
			}
			out.Body.Items = append(out.Body.Items, apiTokenOf(&rows[i]))
		}
		return out, nil
	})

	register(s, everyNamespace(huma.Operation{
		OperationID: "revokeToken",
		Method:      http.MethodDelete,
		Path:        "/v1/tokens/{id}",
		Summary:     "Revoke a token",
		Description: "The token stops working: every server refuses it (401, saying it was revoked) within a second. Revoking a revoked token changes nothing. The token stays in the list (`revoked=true`), with who revoked it.",
		Tags:        []string{"tokens"},
	}), RoleAdmin, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *struct {
		ID string `path:"id" maxLength:"36" doc:"the token's ID"`
	}) (*struct{ Body APIToken }, error) {
		id, err := uuid.Parse(in.ID)
		if err != nil {
			return nil, classBadRequest.problem("the token ID is not a UUID")
		}
		t, err := s.store.TokenRevoke(ctx, id, actor(ctx))
		if err != nil {
			return nil, err
		}
		return &struct{ Body APIToken }{Body: apiTokenOf(t)}, nil
	})
}
