package api

import (
	"io/fs"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
	"github.com/stretchr/testify/require"
)

var fsPathError = fs.PathError{Op: "open", Path: "/etc/cairn/secret", Err: fs.ErrNotExist}

// TestProblemTruncates: a problem repeats at most a short prefix of a value,
// and no file path of the server.
func TestProblemTruncates(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 1000)
	errs := []error{
		&huma.ErrorDetail{Location: "query." + long, Message: long, Value: long},
		&huma.ErrorDetail{Location: "body", Value: map[string]any{"k": long}},
		&huma.ErrorDetail{Location: "body.n", Value: 12},
		&fsPathError,
	}
	for range 200 {
		errs = append(errs, &huma.ErrorDetail{Message: "x"})
	}
	p := classValidationFailed.problem(long, errs...)
	require.LessOrEqual(t, len(p.Detail), maxProblemDetail+len("…"))
	require.True(t, utf8.ValidString(p.Detail))
	require.Len(t, p.Errors, maxProblemErrors+1)
	require.Equal(t, "and 104 more errors", p.Errors[maxProblemErrors].Message)
	e := p.Errors[0]
	require.Equal(t, strings.Repeat("é", 32)+"…", e.Value)
	require.LessOrEqual(t, len(e.Location), maxEchoedLocation+len("…"))
	require.LessOrEqual(t, len(e.Message), maxEchoedMessage+len("…"))
	require.IsType(t, "", p.Errors[1].Value)
	require.LessOrEqual(t, len(p.Errors[1].Value.(string)), maxEchoed+len("…"))
	require.Equal(t, 12, p.Errors[2].Value)
	require.NotContains(t, p.Errors[3].Message, "/etc")
}

// TestProblemClassesDocumented: docs/api.md shows the table of error classes as the
// code has it, and every class has its own code.
func TestProblemClassesDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), problemTable(), "docs/api.md: the table of error classes differs from problemTable()")
	codes := map[string]bool{}
	for _, c := range problemClasses {
		require.False(t, codes[c.code], "code %s used twice", c.code)
		codes[c.code] = true
		require.NotEmpty(t, c.title, c.code)
		require.NotEmpty(t, c.about, c.code)
		require.Equal(t, c.status, classOfStatus(c.status).status, "%s: its status has a general class", c.code)
	}
}
