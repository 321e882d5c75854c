package api

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// Role is what a token may do. Roles are ordered: each includes the ones below it.
type Role int

// The roles of DESIGN §6.
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

// Tokens maps bearer tokens to roles. Lookups compare every known token in constant
// time, so timing does not reveal a prefix. The zero value knows no token. A Tokens
// is immutable once built and safe for concurrent use.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	hash [sha256.Size]byte
	role Role
}

// minTokenLength rejects tokens short enough to guess.
const minTokenLength = 16

// Add registers token with role. It rejects short tokens.
func (t *Tokens) Add(role Role, token string) error {
	if len(token) < minTokenLength {
		return fmt.Errorf("a %s token is shorter than %d characters", role, minTokenLength)
	}
	t.entries = append(t.entries, tokenEntry{hash: sha256.Sum256([]byte(token)), role: role})
	return nil
}

// Merge adds every token of other to t.
func (t *Tokens) Merge(other *Tokens) {
	t.entries = append(t.entries, other.entries...)
}

// Len reports how many tokens are known.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup returns the role of token, or RoleNone. Hashing first makes every
// comparison the same length; every entry is compared whatever matches.
func (t *Tokens) Lookup(token string) Role {
	h := sha256.Sum256([]byte(token))
	role := RoleNone
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			role = e.role
		}
	}
	return role
}

// ParseTokens reads "role:token,role:token" (CAIRN_TOKENS). Blank items are ignored.
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

// ReadTokensFile reads a CAIRN_TOKENS_FILE: one "role:token" a line; blank lines and
// lines starting with # are ignored.
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

func (t *Tokens) addItem(item string) error {
	roleName, token, ok := strings.Cut(item, ":")
	if !ok {
		return fmt.Errorf("want role:token")
	}
	role, err := ParseRole(roleName)
	if err != nil {
		return err
	}
	return t.Add(role, strings.TrimSpace(token))
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
		next(ctx)
		return
	}
	header := ctx.Header("Authorization")
	scheme, token, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="cairn"`)
		_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "a bearer token is required")
		return
	}
	have := s.cfg.Tokens.Lookup(strings.TrimSpace(token))
	if have == RoleNone {
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="cairn", error="invalid_token"`)
		_ = huma.WriteErr(s.api, ctx, http.StatusUnauthorized, "the bearer token is not valid")
		return
	}
	if have < need {
		_ = huma.WriteErr(s.api, ctx, http.StatusForbidden, fmt.Sprintf("this operation needs the %s role; the token has %s", need, have))
		return
	}
	next(huma.WithValue(ctx, roleKey, have))
}

const roleKey ctxKey = iota + 10

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
