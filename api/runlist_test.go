package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListRunsLeavesOutLargeInputs: list items carry a run's input only when it
// is small; a larger one is left out (null, input_omitted) so that a page stays
// small whatever the inputs. GET /v1/runs/{id} has every input whole.
func TestListRunsLeavesOutLargeInputs(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deployHello(t)
	inputs := map[string]string{
		"none":     ``,
		"small":    `{"who":"world"}`,
		"at limit": `"` + strings.Repeat("a", 4096-2) + `"`,
		"over":     `"` + strings.Repeat("a", 4096-1) + `"`,
		// Compresses to almost nothing: its stored size is small, its text is not.
		"large compressible": `{"x":"` + strings.Repeat("a", 1<<20-100) + `"}`,
		"large":              fmt.Sprintf(`[%s0]`, strings.Repeat(`{"k":"0123456789abcdef"},`, 20_000)),
	}
	ids := map[string]string{}
	for name, input := range inputs {
		body := `{}`
		if input != "" {
			body = `{"input":` + input + `}`
		}
		a := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(body))
		require.Equal(t, http.StatusAccepted, a.status, "%s: %.300s", name, a.body)
		var run struct {
			ID    string          `json:"id"`
			Input json.RawMessage `json:"input"`
		}
		require.NoError(t, json.Unmarshal(a.body, &run))
		ids[run.ID] = name
	}

	a := tb.send(t, http.MethodGet, "/v1/runs?limit=1000", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	require.Less(t, len(a.body), 32<<10, "the page holds no large input")
	var page struct {
		Items []struct {
			ID           string          `json:"id"`
			Input        json.RawMessage `json:"input"`
			InputOmitted *bool           `json:"input_omitted"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(a.body, &page))
	seen := 0
	for _, item := range page.Items {
		name, ok := ids[item.ID]
		if !ok {
			continue // the run deployHello made
		}
		seen++
		switch name {
		case "none":
			require.JSONEq(t, `null`, string(item.Input))
			require.Nil(t, item.InputOmitted, "no input is not an omitted one")
		case "small", "at limit":
			require.JSONEq(t, inputs[name], string(item.Input), name)
			require.Nil(t, item.InputOmitted, name)
		default:
			require.JSONEq(t, `null`, string(item.Input), name)
			require.NotNil(t, item.InputOmitted, name)
			require.True(t, *item.InputOmitted, name)
		}

		// The run itself has its whole input.
		one := tb.send(t, http.MethodGet, "/v1/runs/"+item.ID, nil, nil)
		require.Equal(t, http.StatusOK, one.status)
		var run struct {
			Input        json.RawMessage `json:"input"`
			InputOmitted *bool           `json:"input_omitted"`
		}
		require.NoError(t, json.Unmarshal(one.body, &run))
		if inputs[name] == "" {
			require.JSONEq(t, `null`, string(run.Input))
		} else {
			require.JSONEq(t, inputs[name], string(run.Input), name)
		}
		require.Nil(t, run.InputOmitted, name)
	}
	require.Equal(t, len(inputs), seen)
}
