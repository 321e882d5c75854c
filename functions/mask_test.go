package functions

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMaskWriter: secret values are masked however the writes split them, in
// their raw and JSON-escaped forms; a nil masker passes everything through.
func TestMaskWriter(t *testing.T) {
	t.Parallel()
	m := NewMasker([]string{"s3cr3t-value", `a"b`, ""})
	in := []byte(`token=s3cr3t-value json="a\"b" raw=a"b end s3cr3t-valu`)
	for split := 1; split <= len(in); split++ {
		var out bytes.Buffer
		w := m.Writer(&out)
		for i := 0; i < len(in); i += split {
			_, err := w.Write(in[i:min(i+split, len(in))])
			require.NoError(t, err)
		}
		require.NoError(t, w.Flush())
		require.Equal(t, `token=*** json="***" raw=*** end s3cr3t-valu`, out.String(), "split %d", split)
	}
	require.Equal(t, "x ***", m.String("x s3cr3t-value"))

	// Only what could start a value waits for the next write: a live log shows the
	// rest at once.
	var live bytes.Buffer
	w := m.Writer(&live)
	_, _ = w.Write([]byte("token=s3cr3t-value\n"))
	require.Equal(t, "token=***\n", live.String())
	_, _ = w.Write([]byte("next s3cr"))
	require.Equal(t, "token=***\nnext ", live.String(), "s3cr may start the value: held back")
	_, _ = w.Write([]byte("een\n"))
	require.Equal(t, "token=***\nnext s3creen\n", live.String())

	var nilMasker *Masker
	require.Nil(t, NewMasker(nil))
	require.Equal(t, "s3cr3t-value", nilMasker.String("s3cr3t-value"))
	var out bytes.Buffer
	w = nilMasker.Writer(&out)
	_, _ = w.Write([]byte("abc"))
	require.NoError(t, w.Flush())
	require.Equal(t, "abc", out.String())
}
