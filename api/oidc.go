package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/client"
	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// OIDCConfig configures OIDC bearers (docs/security.md, "OIDC bearers"): JWTs an
// OpenID provider signed, such as a CI system's workload identity tokens.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL, exactly as its tokens' iss and its
	// discovery document give it (CAIRN_OIDC_ISSUER). Required.
	Issuer string
	// Audience is what a bearer's aud must hold (CAIRN_OIDC_AUDIENCE). Required.
	Audience string
	// Roles gives a verified bearer its role (CAIRN_OIDC_ROLE_MAP). Required.
	Roles *RoleMap
	// HTTPClient fetches the discovery document and the keys; default a client
	// with a 10 s timeout.
	HTTPClient *http.Client
	// Logger receives discovery failures; default: discard.
	Logger *slog.Logger
	// KeyRefetchBurst and KeyRefetchEvery bound how often a token signed with a
	// key this server has not seen makes it fetch the provider's keys again (a
	// rotation's new key): KeyRefetchBurst at once, then one per KeyRefetchEvery,
	// so that tokens with made-up key IDs cannot make it hammer the provider.
	// Defaults 5 and 10 s.
	KeyRefetchBurst int
	KeyRefetchEvery time.Duration
}

// OIDCBearers verifies OIDC JWT bearers: the signature against the issuer's keys
// (fetched from its jwks_uri, cached, fetched again when a token names a key not
// in the cache, as after a rotation), the issuer, the audience and the expiry;
// then maps the claims to a role. Safe for concurrent use.
type OIDCBearers struct {
	cfg    OIDCConfig
	logger *slog.Logger

	mu        sync.Mutex
	keys      oidc.KeySet // nil until discovery succeeded
	lastTried time.Time
}

// discoveryRetry is how long after a failed discovery the next bearer tries again.
const discoveryRetry = 10 * time.Second

// NewOIDCBearers checks cfg and tries the issuer's discovery document once: a
// failure is logged, not returned (the server still starts: static tokens keep
// working) and retried by the next bearer at most every 10 s.
func NewOIDCBearers(ctx context.Context, cfg OIDCConfig) (*OIDCBearers, error) {
	switch {
	case cfg.Issuer == "":
		return nil, errors.New("OIDC bearers: no issuer")
	case cfg.Audience == "":
		return nil, errors.New("OIDC bearers: no audience (CAIRN_OIDC_AUDIENCE)")
	case cfg.Roles == nil || cfg.Roles.Len() == 0:
		return nil, errors.New("OIDC bearers: no role map (CAIRN_OIDC_ROLE_MAP)")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.KeyRefetchBurst <= 0 {
		cfg.KeyRefetchBurst = 5
	}
	if cfg.KeyRefetchEvery <= 0 {
		cfg.KeyRefetchEvery = 10 * time.Second
	}
	b := &OIDCBearers{cfg: cfg, logger: cfg.Logger.With("component", "oidc")}
	if _, err := b.keySet(ctx); err != nil {
		b.logger.Error("OIDC discovery failed: OIDC bearers are refused until it succeeds", "issuer", cfg.Issuer, "error", err)
	}
	return b, nil
}

// keySet returns the issuer's keys, running discovery the first time.
func (b *OIDCBearers) keySet(ctx context.Context) (oidc.KeySet, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keys != nil {
		return b.keys, nil
	}
	if !b.lastTried.IsZero() && time.Since(b.lastTried) < discoveryRetry {
		return nil, errors.New("the OIDC provider's discovery failed a moment ago")
	}
	b.lastTried = time.Now()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	disc, err := client.Discover(dctx, b.cfg.Issuer, b.cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", b.cfg.Issuer, err)
	}
	if disc.JwksURI == "" {
		return nil, fmt.Errorf("discover %s: the document has no jwks_uri", b.cfg.Issuer)
	}
	b.keys = &guardedKeySet{inner: rp.NewRemoteKeySet(b.cfg.HTTPClient, disc.JwksURI),
		known: map[string]bool{}, burst: b.cfg.KeyRefetchBurst, every: b.cfg.KeyRefetchEvery, tokens: float64(b.cfg.KeyRefetchBurst), at: time.Now()}
	return b.keys, nil
}

// BearerError is why a bearer was refused: Status 401 (not valid: bad signature,
// expired, wrong issuer or audience) or 403 (valid, but mapped to no role).
type BearerError struct {
	Status int
	Reason string
}

func (e *BearerError) Error() string { return e.Reason }

// errNotJWT is VerifyBearer's answer for a bearer that is no JWT at all.
var errNotJWT = errors.New("not a JWT")

// VerifyBearer returns the identity token gives, or a *BearerError; errNotJWT
// when token is no JWT (a static token mistyped, most likely).
func (b *OIDCBearers) VerifyBearer(ctx context.Context, token string) (Identity, error) {
	if strings.Count(token, ".") != 2 {
		return Identity{}, errNotJWT
	}
	invalid := func(format string, args ...any) (Identity, error) {
		return Identity{}, &BearerError{Status: http.StatusUnauthorized, Reason: fmt.Sprintf(format, args...)}
	}
	var claims oidc.AccessTokenClaims
	payload, err := oidc.ParseToken(token, &claims)
	if err != nil {
		return Identity{}, errNotJWT
	}
	// The checks that need no key first: a token for another issuer or audience,
	// or an expired one, costs no key fetch.
	if claims.Issuer != b.cfg.Issuer {
		return invalid("the OIDC token's issuer is %q, not this server's issuer %q", claims.Issuer, b.cfg.Issuer)
	}
	if !slices.Contains(claims.Audience, b.cfg.Audience) {
		return invalid("the OIDC token's audience %q does not hold %q (CAIRN_OIDC_AUDIENCE)", strings.Join(claims.Audience, " "), b.cfg.Audience)
	}
	if err := oidc.CheckExpiration(&claims, 0); err != nil {
		return invalid("the OIDC token expired at %s", claims.Expiration.AsTime().UTC().Format(time.RFC3339))
	}
	if nbf := claims.NotBefore.AsTime(); !nbf.IsZero() && nbf.After(time.Now().Add(time.Minute)) {
		return invalid("the OIDC token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	keys, err := b.keySet(ctx)
	if err != nil {
		b.logger.WarnContext(ctx, "OIDC bearer refused: no keys", "error", err)
		return invalid("the OIDC provider's keys cannot be fetched now: try again later")
	}
	if err := oidc.CheckSignature(ctx, token, payload, &claims, nil, keys); err != nil {
		return invalid("the OIDC token's signature is not valid (%s)", signatureReason(err))
	}
	var all map[string]any
	if err := json.Unmarshal(payload, &all); err != nil {
		return invalid("the OIDC token's claims are not a JSON object")
	}
	who := OIDCIdentity(b.cfg.Roles, all)
	if who.Role == RoleNone {
		return Identity{}, &BearerError{Status: http.StatusForbidden, Reason: "the OIDC token maps to no role: " + b.cfg.Roles.Unmapped(all)}
	}
	return who, nil
}

// signatureReason says briefly why a signature check failed, without the
// library's wording of keys.
func signatureReason(err error) string {
	switch {
	case errors.Is(err, oidc.ErrSignatureUnsupportedAlg):
		return "unsupported algorithm"
	case errors.Is(err, errKeyRefetchLimited):
		return "signed with a key the provider does not publish"
	}
	return "no key of the issuer verifies it"
}

// verifyBearer identifies a bearer that is no static token (Config.Bearers).
// refused, when set, is the 401 or 403 to answer with; a bearer that is no JWT
// gives the zero Identity and no refusal, so the caller answers as for any
// unknown token.
func (s *Server) verifyBearer(ctx context.Context, token string) (who Identity, refused *BearerError) {
	who, err := s.cfg.Bearers.VerifyBearer(ctx, token)
	var be *BearerError
	if errors.As(err, &be) {
		return Identity{}, be
	}
	return who, nil
}

// errKeyRefetchLimited refuses a token whose key is unknown while the provider's
// keys were fetched too often (guardedKeySet).
var errKeyRefetchLimited = errors.New("unknown signing key, and the provider's keys were fetched again too often")

// guardedKeySet is the provider's remote key set behind a token bucket: a token
// that names a key ID not seen verifying before may make the inner set fetch the
// keys again only while the bucket has a token (burst, then one per every).
type guardedKeySet struct {
	inner oidc.KeySet

	mu     sync.Mutex
	known  map[string]bool
	burst  int
	every  time.Duration
	tokens float64
	at     time.Time
}

func (g *guardedKeySet) VerifySignature(ctx context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	kid, _ := oidc.GetKeyIDAndAlg(jws)
	g.mu.Lock()
	if !g.known[kid] {
		now := time.Now()
		g.tokens = min(float64(g.burst), g.tokens+float64(now.Sub(g.at))/float64(g.every))
		g.at = now
		if g.tokens < 1 {
			g.mu.Unlock()
			return nil, errKeyRefetchLimited
		}
		g.tokens--
	}
	g.mu.Unlock()
	payload, err := g.inner.VerifySignature(ctx, jws)
	g.mu.Lock()
	if err != nil {
		delete(g.known, kid) // withdrawn by the provider: the next try costs a fetch
	} else if len(g.known) < 64 {
		g.known[kid] = true
	}
	g.mu.Unlock()
	return payload, err
}
