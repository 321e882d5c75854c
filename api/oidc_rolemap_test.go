package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseRoleMap reads CAIRN_OIDC_ROLE_MAP as docs/security.md ("The role
// map") writes it, and refuses what it does not allow with the rule's number.
func TestParseRoleMap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, spec string
		rules      []roleRule
		err        string
	}{
		{name: "empty", spec: " , "},
		{name: "two rules", spec: "groups:platform=admin@*, groups:acme-dev=operator",
			rules: []roleRule{{"groups", "platform", RoleAdmin, ""}, {"groups", "acme-dev", RoleOperator, ""}}},
		{name: "value with colons and equals", spec: "sub:repo:acme/app:ref:refs/heads/main=operator, dn:cn=ci=viewer",
			rules: []roleRule{{"sub", "repo:acme/app:ref:refs/heads/main", RoleOperator, ""}, {"dn", "cn=ci", RoleViewer, ""}}},
		{name: "quoted claim", spec: `"https://acme.example/groups":ops=Admin`,
			rules: []roleRule{{"https://acme.example/groups", "ops", RoleAdmin, ""}}},
		{name: "nested path", spec: "realm_access.roles:cairn=viewer", rules: []roleRule{{"realm_access.roles", "cairn", RoleViewer, ""}}},
		{name: "a namespace", spec: "groups:a=viewer,groups:acme-dev=operator@acme",
			rules: []roleRule{{"groups", "a", RoleViewer, ""}, {"groups", "acme-dev", RoleOperator, "acme"}}},
		{name: "a bad namespace", spec: "groups:a=viewer@Acme", err: `rule 1 (groups:a=viewer@Acme): namespace "Acme" must be`},
		{name: "unknown role", spec: "groups:a=owner", err: `rule 1 (groups:a=owner): unknown role "owner"`},
		{name: "no value", spec: "groups:=admin", err: "the value is empty"},
		{name: "no role", spec: "groups:admin", err: "no '='"},
		{name: "no claim", spec: "platform=admin", err: "want claim:value=role"},
		{name: "bad claim name", spec: "gr oups:a=admin", err: `claim name "gr oups"`},
		{name: "open quote", spec: `"groups:a=admin`, err: "does not close"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseRoleMap(tc.spec)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.rules, m.rules)
		})
	}
}

// TestRoleMapRole gives claims the highest role of the rules they match.
func TestRoleMapRole(t *testing.T) {
	t.Parallel()
	m, err := ParseRoleMap(`groups:platform=admin, groups:dev=operator, email_verified:true=viewer, realm_access.roles:ops=operator, "https://x.example/team":core=admin, owner:acme=viewer`)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		claims map[string]any
		want   Role
	}{
		{"list, highest wins", map[string]any{"groups": []any{"dev", "platform"}}, RoleAdmin},
		{"list", map[string]any{"groups": []any{"dev"}}, RoleOperator},
		{"string", map[string]any{"owner": "acme"}, RoleViewer},
		{"case matters", map[string]any{"owner": "ACME"}, RoleNone},
		{"boolean", map[string]any{"email_verified": true}, RoleViewer},
		{"nested", map[string]any{"realm_access": map[string]any{"roles": []any{"ops"}}}, RoleOperator},
		{"quoted name", map[string]any{"https://x.example/team": "core"}, RoleAdmin},
		{"none", map[string]any{"groups": []any{"marketing"}}, RoleNone},
		{"wrong type", map[string]any{"groups": map[string]any{"platform": true}}, RoleNone},
	} {
		require.Equal(t, tc.want, m.Role(tc.claims), tc.name)
	}
	require.Equal(t, `no rule of CAIRN_OIDC_ROLE_MAP matches: it looks at the claim "groups" (the token has: marketing); the claim "email_verified" (absent from the token); the claim "realm_access.roles" (absent from the token); the claim "https://x.example/team" (absent from the token); the claim "owner" (absent from the token)`,
		m.Unmapped(map[string]any{"groups": []any{"marketing"}}))
}

// TestOIDCName names an OIDC identity by its email, else preferred_username,
// else subject, without control characters.
func TestOIDCName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a@x.example", oidcName(map[string]any{"email": "a@x.example", "sub": "1"}))
	require.Equal(t, "al", oidcName(map[string]any{"email": "", "preferred_username": "al", "sub": "1"}))
	require.Equal(t, "repo:acme/app", oidcName(map[string]any{"sub": "repo:acme/app\n"}))
	require.Equal(t, "ab", oidcName(map[string]any{"sub": "a\x1bb"}))
}

// TestRoleMapGrant: a rule of every namespace wins over scoped ones; without one,
// the highest scoped rule gives its role in its namespace.
func TestRoleMapGrant(t *testing.T) {
	t.Parallel()
	m, err := ParseRoleMap("groups:platform=viewer@*, groups:acme-dev=operator@acme, groups:acme-admins=admin@acme, groups:beta=operator@beta")
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		groups []any
		role   Role
		ns     string
	}{
		{"every namespace wins", []any{"acme-admins", "platform"}, RoleViewer, ""},
		{"scoped", []any{"acme-dev"}, RoleOperator, "acme"},
		{"highest scoped", []any{"beta", "acme-admins"}, RoleAdmin, "acme"},
		{"tie: the first rule's", []any{"beta", "acme-dev"}, RoleOperator, "acme"},
		{"none", []any{"other"}, RoleNone, ""},
	} {
		role, ns := m.Grant(map[string]any{"groups": tc.groups})
		require.Equal(t, tc.role, role, tc.name)
		require.Equal(t, tc.ns, ns, tc.name)
	}
}
