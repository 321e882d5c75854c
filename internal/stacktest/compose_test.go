package stacktest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// repoRoot is the repository's root, from this package's folder.
const repoRoot = "../.."

// composeFile is the part of a Compose file these tests read. Fields that Compose
// accepts in two shapes (list or map, string or list) are kept as yaml.Node and
// read by the helpers below.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string        `yaml:"image"`
	Build       yaml.Node     `yaml:"build"`
	Command     yaml.Node     `yaml:"command"`
	Entrypoint  yaml.Node     `yaml:"entrypoint"`
	Environment yaml.Node     `yaml:"environment"`
	Ports       []yaml.Node   `yaml:"ports"`
	Volumes     []yaml.Node   `yaml:"volumes"`
	DependsOn   yaml.Node     `yaml:"depends_on"`
	Healthcheck *composeCheck `yaml:"healthcheck"`
}

type composeCheck struct {
	Test    yaml.Node `yaml:"test"`
	Disable bool      `yaml:"disable"`
}

// loadCompose reads and decodes compose.yaml, refusing unknown top-level keys
// in services (a typo such as "depend_on" would otherwise pass unnoticed).
func loadCompose(t *testing.T) *composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "compose.yaml"))
	require.NoError(t, err)
	var raw struct {
		Services map[string]map[string]any `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &raw))
	known := map[string]bool{
		"image": true, "build": true, "command": true, "entrypoint": true, "environment": true,
		"ports": true, "volumes": true, "depends_on": true, "healthcheck": true, "restart": true,
		"security_opt": true, "devices": true,
	}
	for name, svc := range raw.Services {
		for key := range svc {
			require.True(t, known[key], "service %s: unexpected key %q (typo, or teach this test)", name, key)
		}
	}
	var c composeFile
	require.NoError(t, yaml.Unmarshal(data, &c))
	require.NotEmpty(t, c.Services)
	return &c
}

func (c *composeFile) service(t *testing.T, name string) composeService {
	t.Helper()
	s, ok := c.Services[name]
	require.True(t, ok, "compose.yaml has no service %q", name)
	return s
}

// hasBuild reports whether the service is built from a Dockerfile.
func (s composeService) hasBuild() bool { return s.Build.Kind != 0 }

// env returns the service's environment, interpolated with Compose's defaults
// (as `docker compose up` sees it with no .env file and no variables set).
func (s composeService) env(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch s.Environment.Kind {
	case 0:
	case yaml.MappingNode:
		var m map[string]string
		require.NoError(t, s.Environment.Decode(&m))
		for k, v := range m {
			out[k] = interpolate(v)
		}
	case yaml.SequenceNode:
		var l []string
		require.NoError(t, s.Environment.Decode(&l))
		for _, item := range l {
			k, v, _ := strings.Cut(item, "=")
			out[k] = interpolate(v)
		}
	default:
		t.Fatalf("environment: unexpected YAML kind %v", s.Environment.Kind)
	}
	return out
}

// strings decodes a field that is a string or a list of strings.
func nodeStrings(t *testing.T, n yaml.Node) []string {
	t.Helper()
	switch n.Kind {
	case 0:
		return nil
	case yaml.ScalarNode:
		return []string{n.Value}
	case yaml.SequenceNode:
		var l []string
		require.NoError(t, n.Decode(&l))
		return l
	}
	t.Fatalf("unexpected YAML kind %v at line %d", n.Kind, n.Line)
	return nil
}

// dependsOn returns each dependency and its condition (Compose's default for
// the list form is service_started).
func (s composeService) dependsOn(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch s.DependsOn.Kind {
	case 0:
	case yaml.SequenceNode:
		var l []string
		require.NoError(t, s.DependsOn.Decode(&l))
		for _, d := range l {
			out[d] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		require.NoError(t, s.DependsOn.Decode(&m))
		for d, v := range m {
			out[d] = v.Condition
			if out[d] == "" {
				out[d] = "service_started"
			}
		}
	}
	return out
}

// published is a port mapping's host side: the address it binds ("" = every
// interface) and the whole mapping, for messages.
type published struct {
	hostIP, spec string
}

// publishedPorts reads short ("127.0.0.1:8080:8080") and long
// ({target, published, host_ip}) port syntax.
func (s composeService) publishedPorts(t *testing.T) []published {
	t.Helper()
	var out []published
	for _, n := range s.Ports {
		switch n.Kind {
		case yaml.ScalarNode:
			spec := interpolate(n.Value)
			spec, _, _ = strings.Cut(spec, "/") // protocol
			parts := strings.Split(spec, ":")
			var ip string
			if len(parts) == 3 {
				ip = parts[0]
			}
			// "8080" or "8080:8080" binds every interface.
			out = append(out, published{hostIP: ip, spec: n.Value})
		case yaml.MappingNode:
			var p struct {
				HostIP    string `yaml:"host_ip"`
				Published string `yaml:"published"`
				Target    string `yaml:"target"`
			}
			require.NoError(t, n.Decode(&p))
			out = append(out, published{hostIP: p.HostIP, spec: fmt.Sprintf("%s:%s:%s", p.HostIP, p.Published, p.Target)})
		default:
			t.Fatalf("ports: unexpected YAML kind %v at line %d", n.Kind, n.Line)
		}
	}
	return out
}

// mounts returns the service's bind mounts and volumes as source → target.
func (s composeService) mounts(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range s.Volumes {
		switch n.Kind {
		case yaml.ScalarNode:
			parts := strings.Split(interpolate(n.Value), ":")
			require.GreaterOrEqual(t, len(parts), 2, "volume %q", n.Value)
			out[parts[0]] = parts[1]
		case yaml.MappingNode:
			var v struct{ Source, Target string }
			require.NoError(t, n.Decode(&v))
			out[v.Source] = v.Target
		}
	}
	return out
}

// interpolateRE matches Compose's variable forms: $$, ${NAME}, ${NAME:-default},
// ${NAME-default}, ${NAME:?err}, ${NAME?err} and $NAME.
var interpolateRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// interpolate expands s as Compose does with no variable set: defaults apply,
// bare variables are empty, "$$" is "$".
func interpolate(s string) string {
	return interpolateRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sub := interpolateRE.FindStringSubmatch(m)
		if sub[2] == ":-" || sub[2] == "-" {
			return sub[3]
		}
		return ""
	})
}

func TestInterpolate(t *testing.T) {
	t.Parallel()

	tests := []struct{ name, in, want string }{
		{name: "plain", in: "abc", want: "abc"},
		{name: "default", in: "a${X:-b c}d", want: "ab cd"},
		{name: "default without colon", in: "${X-y}", want: "y"},
		{name: "bare", in: "${X}/$Y/", want: "//"},
		{name: "dollar", in: "$$HOME", want: "$HOME"},
		{name: "required", in: "${X:?set X}", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, interpolate(tt.in))
		})
	}
}

// imagePinned reports whether an image reference names a fixed version: a
// digest, or a tag other than "latest" (an untagged reference means latest).
func imagePinned(ref string) bool {
	if strings.Contains(ref, "@sha256:") {
		return true
	}
	if strings.Contains(ref, "$") {
		return false // a variable: whatever the environment says
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon < slash+1 { // no tag after the last path segment ("host:5000/img" has none)
		return false
	}
	tag := ref[colon+1:]
	return tag != "" && tag != "latest"
}

func TestImagePinned(t *testing.T) {
	t.Parallel()

	tests := []struct {
		ref  string
		want bool
	}{
		{"postgres:16.4", true},
		{"minio/minio:RELEASE.2025-04-22T22-12-26Z", true},
		{"registry.example:5000/team/img:1.2", true},
		{"alpine@sha256:0123", true},
		{"postgres", false},
		{"postgres:latest", false},
		{"registry.example:5000/team/img", false},
		{"img:${TAG}", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, imagePinned(tt.ref))
		})
	}
}
