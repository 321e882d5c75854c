package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cairnrun/cairn/namespace"
)

// RoleMap gives an OIDC identity its role from the claims of its token
// (CAIRN_OIDC_ROLE_MAP; docs/security.md, "Single sign-on"). The zero value maps
// no one. A RoleMap is immutable once parsed and safe for concurrent use.
type RoleMap struct {
	rules []roleRule
}

// roleRule gives role to an identity whose claim holds value, in namespace ns
// ("" for every namespace).
type roleRule struct {
	claim string
	value string
	role  Role
	ns    string
}

// ParseRoleMap reads a role map: rules separated by commas, each
//
//	claim ":" value "=" role [ "@" namespace ]
//
// claim is the claim's name: letters, digits, '_', '-', '.' and '/', or any text
// but '"' in double quotes ("https://acme.example/groups"); a name with dots that
// is no claim of the token is read as a path into nested objects
// (realm_access.roles). value is the text the claim must hold, compared exactly:
// everything up to the last '=', so it may hold ':' and '=' but not ','. role is
// viewer, operator or admin. The namespace suffix scopes the role to one
// namespace (docs/security.md, "Namespaces"); "@*" or none: every namespace.
// Blank rules are ignored.
func ParseRoleMap(spec string) (*RoleMap, error) {
	m := &RoleMap{}
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		r, err := parseRoleRule(item)
		if err != nil {
			return nil, fmt.Errorf("rule %d (%s): %w", i+1, item, err)
		}
		m.rules = append(m.rules, r)
	}
	return m, nil
}

func parseRoleRule(item string) (roleRule, error) {
	var claim, rest string
	if strings.HasPrefix(item, `"`) {
		end := strings.Index(item[1:], `"`)
		if end < 0 {
			return roleRule{}, fmt.Errorf(`the claim's name opens a '"' that does not close`)
		}
		claim, rest = item[1:1+end], item[2+end:]
		if claim == "" {
			return roleRule{}, fmt.Errorf("the claim's name is empty")
		}
		if !strings.HasPrefix(rest, ":") {
			return roleRule{}, fmt.Errorf(`want ':' after the quoted claim name`)
		}
		rest = rest[1:]
	} else {
		var ok bool
		claim, rest, ok = strings.Cut(item, ":")
		if !ok {
			return roleRule{}, fmt.Errorf("want claim:value=role")
		}
		if claim == "" || strings.Trim(claim, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./") != "" {
			return roleRule{}, fmt.Errorf(`claim name %q: want letters, digits, '_', '-', '.' and '/', or a name in double quotes`, claim)
		}
	}
	eq := strings.LastIndex(rest, "=")
	if eq < 0 {
		return roleRule{}, fmt.Errorf("want claim:value=role (no '=')")
	}
	value, roleText := rest[:eq], strings.TrimSpace(rest[eq+1:])
	if value == "" {
		return roleRule{}, fmt.Errorf("the value is empty")
	}
	roleText, ns, scoped := strings.Cut(roleText, "@")
	role, err := ParseRole(roleText)
	if err != nil {
		return roleRule{}, err
	}
	if !scoped || ns == "*" {
		ns = ""
	} else if err := namespace.Check(ns); err != nil {
		return roleRule{}, err
	}
	return roleRule{claim: claim, value: value, role: role, ns: ns}, nil
}

// Len reports how many rules the map has.
func (m *RoleMap) Len() int { return len(m.rules) }

// Claims returns the names of the claims the rules look at, each once, in order.
func (m *RoleMap) Claims() []string {
	var out []string
	for _, r := range m.rules {
		if !slices.Contains(out, r.claim) {
			out = append(out, r.claim)
		}
	}
	return out
}

// Role returns the highest role a rule gives claims (a token's decoded payload);
// RoleNone when no rule matches.
func (m *RoleMap) Role(claims map[string]any) Role {
	role, _ := m.Grant(claims)
	return role
}

// Grant returns the role and namespace claims are given: the highest role of the
// matching rules of every namespace, if one matches; else the highest of the
// matching rules scoped to a namespace, in that namespace (the first such rule's,
// on a tie). RoleNone when no rule matches.
func (m *RoleMap) Grant(claims map[string]any) (Role, string) {
	every, scoped, ns := RoleNone, RoleNone, ""
	for _, r := range m.rules {
		if !slices.Contains(claimValues(claims, r.claim), r.value) {
			continue
		}
		switch {
		case r.ns == "" && r.role > every:
			every = r.role
		case r.ns != "" && r.role > scoped:
			scoped, ns = r.role, r.ns
		}
	}
	if every != RoleNone {
		return every, ""
	}
	return scoped, ns
}

// Unmapped says why claims map to no role: which claims the rules look at and
// what the token holds in each (the holder's own claims, never a token).
func (m *RoleMap) Unmapped(claims map[string]any) string {
	var parts []string
	for _, name := range m.Claims() {
		vals := claimValues(claims, name)
		switch {
		case len(vals) == 0:
			parts = append(parts, fmt.Sprintf("%q (absent from the token)", name))
		default:
			shown := strings.Join(vals, ", ")
			if len(shown) > 200 {
				shown = shown[:200] + "…"
			}
			parts = append(parts, fmt.Sprintf("%q (the token has: %s)", name, shown))
		}
	}
	if len(parts) == 0 {
		return "CAIRN_OIDC_ROLE_MAP has no rules, so no identity of the issuer has a role"
	}
	return "no rule of CAIRN_OIDC_ROLE_MAP matches: it looks at the claim " + strings.Join(parts, "; the claim ")
}

// claimValues returns what claim name holds as text: a string, each string of a
// list, or the JSON text of a number or boolean. A name with dots that is no
// claim is followed as a path into nested objects.
func claimValues(claims map[string]any, name string) []string {
	v, ok := claims[name]
	if !ok && strings.Contains(name, ".") {
		var cur any = claims
		for _, part := range strings.Split(name, ".") {
			obj, isObj := cur.(map[string]any)
			if !isObj {
				cur = nil
				break
			}
			cur = obj[part]
		}
		v = cur
	}
	var out []string
	add := func(x any) {
		switch x := x.(type) {
		case string:
			out = append(out, x)
		case bool, float64, json.Number:
			out = append(out, fmt.Sprint(x))
		}
	}
	if list, isList := v.([]any); isList {
		for _, x := range list {
			add(x)
		}
	} else {
		add(v)
	}
	return out
}

// oidcName is the name an OIDC identity acts under (the actor of its events): its
// email, else its preferred_username, else its subject; at most 200 characters.
func oidcName(claims map[string]any) string {
	for _, c := range []string{"email", "preferred_username", "sub"} {
		if s, ok := claims[c].(string); ok && strings.TrimSpace(s) != "" {
			s = strings.Map(func(r rune) rune {
				if r < 0x20 || r == 0x7f {
					return -1
				}
				return r
			}, strings.TrimSpace(s))
			if len(s) > 200 {
				s = s[:200]
			}
			return s
		}
	}
	return "oidc"
}

// OIDCIdentity is the identity an OIDC token's verified claims give: the role
// roles map them to, named by oidcName. Its Role is RoleNone when no rule matches
// (roles.Unmapped says why).
func OIDCIdentity(roles *RoleMap, claims map[string]any) Identity {
	role, ns := roles.Grant(claims)
	return Identity{Role: role, Name: oidcName(claims), Namespace: ns}
}
