package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Role is what a token may do. Roles are ordered: each includes the ones below it.
type Role int

// The roles of a token (CAIRN_TOKENS, README.md "Configuration"), each allowed
// what the one before it is.
const (
	// RoleNone marks public operations (health, the OpenAPI document).
	RoleNone Role = iota
	// RoleViewer reads.
	RoleViewer
	// RoleOperator deploys, starts and cancels.
	RoleOperator
	// RoleAdmin may do everything.
	RoleAdmin
)

// String returns the role's name as used in CAIRN_TOKENS.
func (r Role) String() string {
	switch r {
	case RoleViewer:
		return "viewer"
	case RoleOperator:
		return "operator"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return RoleViewer, nil
	case "operator":
		return RoleOperator, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("unknown role %q (want viewer, operator or admin)", s)
}

// Tokens maps bearer tokens to roles and names. Lookups compare every known token in
// constant time, so timing does not reveal a prefix. The zero value knows no token. A
// Tokens is immutable once built and safe for concurrent use.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	hash    [sha256.Size]byte
	role    Role
	name    string
	unnamed bool
}

// Identity is who a request acts as: its token's role and name. The name is the
// actor of every event an operator action writes ("alice"); a token given without
// one is named after its role ("operator"), and Unnamed.
type Identity struct {
	Role Role
	Name string
	// Unnamed is true for a token given without a name: every such token of a role
	// shares the role's name, so it tells no person apart (it may not be one of
	// several approvers of a step).
	Unnamed bool
	// Namespace is the one namespace the token acts in (package namespace); ""
	// for a token of every namespace (api/namespace.go).
	Namespace string
}

// tokenNamePattern is what a token's name may be: a short word of letters, digits,
// '.', '_', '@' and '-'.
var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$`)

// minTokenLength rejects tokens short enough to guess.
const minTokenLength = 16

// Add registers token with role, named after the role. It rejects short tokens.
func (t *Tokens) Add(role Role, token string) error {
	return t.AddNamed(role, "", token)
}

// AddNamed registers token with role and name (the actor its actions are recorded
// under; "" names it after the role). It rejects short tokens and bad names.
func (t *Tokens) AddNamed(role Role, name, token string) error {
	if len(token) < minTokenLength {
		return fmt.Errorf("a %s token is shorter than %d characters", role, minTokenLength)
	}
	unnamed := name == ""
	if unnamed {
		name = role.String()
	} else if !tokenNamePattern.MatchString(name) {
		return fmt.Errorf("token name %q: want letters, digits, '.', '_', '@' or '-' (at most 63)", name)
	}
	t.entries = append(t.entries, tokenEntry{hash: sha256.Sum256([]byte(token)), role: role, name: name, unnamed: unnamed})
	return nil
}

// Merge adds every token of other to t.
func (t *Tokens) Merge(other *Tokens) {
	t.entries = append(t.entries, other.entries...)
}

// Len reports how many tokens are known.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup returns the role of token, or RoleNone.
func (t *Tokens) Lookup(token string) Role {
	return t.Identify(token).Role
}

// Identify returns the role and name of token; the zero Identity (RoleNone) for an
// unknown token. Hashing first makes every comparison the same length; every entry
// is compared whatever matches.
func (t *Tokens) Identify(token string) Identity {
	return t.IdentifyHash(TokenHash(token))
}

// TokenHash is the SHA-256 of token: what Tokens keeps of it, and what a
// server-side session (the web UI's) keeps to name its token without holding it.
func TokenHash(token string) [sha256.Size]byte {
	return sha256.Sum256([]byte(token))
}

// IdentifyHash returns the role and name of the token whose TokenHash is h; the
// zero Identity for an unknown one. Every entry is compared, in constant time.
func (t *Tokens) IdentifyHash(h [sha256.Size]byte) Identity {
	var id Identity
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			id = Identity{Role: e.role, Name: e.name, Unnamed: e.unnamed}
		}
	}
	return id
}

// ParseTokens reads "role:token,role:name:token" (CAIRN_TOKENS): a token may carry
// a name, the actor its actions are recorded under (see addItem). Blank items are
// ignored.
func ParseTokens(spec string) (*Tokens, error) {
	t := &Tokens{}
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if err := t.addItem(item); err != nil {
			return nil, fmt.Errorf("token %d: %w", i+1, err)
		}
	}
	return t, nil
}

// ReadTokensFile reads a CAIRN_TOKENS_FILE: one "role:token" or "role:name:token" a
// line; blank lines and lines starting with # are ignored.
func ReadTokensFile(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	defer f.Close()
	t := &Tokens{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := t.addItem(line); err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %w", path, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	return t, nil
}

// addItem reads "role:token" or "role:name:token". The middle part is a name only
// when it is one (tokenNamePattern) and what follows is long enough to be a token;
// otherwise, as before names existed, everything after the role is the token, colons
// included. (A token that holds colons and could read as name:token must be given
// with a name.)
func (t *Tokens) addItem(item string) error {
	roleName, rest, ok := strings.Cut(item, ":")
	if !ok {
		return fmt.Errorf("want role:token or role:name:token")
	}
	role, err := ParseRole(roleName)
	if err != nil {
		return err
	}
	name, token, named := strings.Cut(rest, ":")
	if !named || !tokenNamePattern.MatchString(name) || len(strings.TrimSpace(token)) < minTokenLength {
		name, token = "", rest
	}
	return t.AddNamed(role, name, strings.TrimSpace(token))
}

// BearerVerifier identifies a bearer that is none of the static Tokens (Config.Bearers;
// OIDCBearers verifies OIDC JWTs). Its error is a *BearerError to refuse the request
// with its status and reason; any other error answers as for an unknown token.
type BearerVerifier interface {
	VerifyBearer(ctx context.Context, token string) (Identity, error)
}

const (
	securityScheme = "bearer"
	metaRole       = "cairn-role"
)

// authMiddleware enforces the role an operation declares in its metadata: 401 without
// a valid token, 403 with a role too low. It never logs the token.
func (s *Server) authMiddleware(ctx huma.Context, next func(huma.Context)) {
	need, _ := ctx.Operation().Metadata[metaRole].(Role)
	if need == RoleNone {
		if ctx.Operation().OperationID == "deliverHook" {
			s.enterNamespace(ctx, Identity{}, next) // its namespace: header or ?namespace=
			return
		}
		next(ctx)
		return
	}
	// A request made in this process for a user the caller has authenticated (the
	// web UI's, for its session): no token travels with it.
	if who, ok := ctx.Context().Value(inProcessIdentityKey).(Identity); ok && who.Role != RoleNone {
		if who.Role < need {
			_ = huma.WriteErr(s.api, ctx, http.StatusForbidden, fmt.Sprintf("this operation needs the %s role; the session's token has %s", need, who.Role))
			return
		}
		s.enterNamespace(huma.WithValue(ctx, identityKey, who), who, next)
		return
	}
	header := ctx.Header("Authorization")
	scheme, token, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="cairn"`)
		_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "a bearer token is required")
		return
	}
	who := s.cfg.Tokens.Identify(strings.TrimSpace(token))
	if who.Role == RoleNone {
		var ok bool
		if who, ok = s.identifyManaged(ctx, strings.TrimSpace(token)); !ok {
			return // refused: expired, revoked, or the catalog unavailable (tokens.go)
		}
	}
	if who.Role == RoleNone && s.cfg.Bearers != nil {
		// Neither a static nor a managed token: an OIDC JWT, perhaps (api/oidc.go).
		var refused *BearerError
		if who, refused = s.verifyBearer(ctx.Context(), strings.TrimSpace(token)); refused != nil {
			if refused.Status == http.StatusUnauthorized {
				ctx.SetHeader("WWW-Authenticate", `Bearer realm="cairn", error="invalid_token"`)
			}
			_ = huma.WriteErr(s.api, ctx, refused.Status, refused.Reason)
			return
		}
	}
	have := who.Role
	if have == RoleNone {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="cairn", error="invalid_token"`)
		_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "the bearer token is not valid")
		return
	}
	if have < need {
		_ = huma.WriteErr(s.api, ctx, http.StatusForbidden, fmt.Sprintf("this operation needs the %s role; the token has %s", need, have))
		return
	}
	s.enterNamespace(huma.WithValue(ctx, identityKey, who), who, next)
}

const (
	identityKey ctxKey = iota + 10
	inProcessIdentityKey
)

// WithIdentity returns ctx carrying who: a request made with it to the API's
// handler in this process (never over the network: a context cannot travel) acts
// as who, with no token, exactly as a request with who's token would. The web UI
// calls the API so for a logged-in session, which keeps the hash of its token, not
// the token. The caller must have authenticated who (Tokens.IdentifyHash).
func WithIdentity(ctx context.Context, who Identity) context.Context {
	return context.WithValue(ctx, inProcessIdentityKey, who)
}

// actor is the name of the token a request came with (Identity.Name), recorded in
// the events its actions write; "" on a public operation.
func actor(ctx context.Context) string {
	who, _ := ctx.Value(identityKey).(Identity)
	return who.Name
}

// withRole marks op as needing role: its security requirement shows in the OpenAPI
// document (its 401 and 403 responses are listed by errorResponses).
func withRole(op huma.Operation, role Role) huma.Operation {
	if role == RoleNone {
		return op
	}
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	op.Metadata[metaRole] = role
	op.Security = []map[string][]string{{securityScheme: {}}}
	if op.Description != "" {
		op.Description += "\n\n"
	}
	op.Description += "Requires the `" + role.String() + "` role."
	return op
}
