package runtime

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadItems: items are read a page at a time from a cursor, for a JSON array and
// JSON Lines: every item once, in order, and the end seen.
func TestReadItems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, format, blob string
		want               []string
	}{
		{"array", "array", ` [ 1, {"a": [2, 3]} ,"x,]" ,null, [4] ]  `, []string{`1`, `{"a": [2, 3]}`, `"x,]"`, `null`, `[4]`}},
		{"empty array", "array", `[]`, nil},
		{"lines", "lines", "1\n{\"a\":2}\n\n\"x\"\n[3]\n", []string{`1`, `{"a":2}`, `"x"`, `[3]`}},
		{"lines without final newline", "lines", "1\n2", []string{`1`, `2`}},
		{"empty lines", "lines", "", nil},
	}
	for _, tt := range tests {
		for _, page := range []int{1, 2, 3, 100} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var got []string
				var off int64
				for round := 0; ; round++ {
					require.Less(t, round, 20)
					items, next, end, err := readItems(strings.NewReader(tt.blob[off:]), tt.format, off, page)
					require.NoError(t, err, "page %d at %d", page, off)
					var arr []rawItem
					require.NoError(t, jsonUnmarshal(items, &arr))
					for _, it := range arr {
						got = append(got, string(it))
					}
					require.LessOrEqual(t, len(arr), page)
					off = next
					if end {
						break
					}
				}
				require.Equal(t, tt.want, got, "page %d", page)
			})
		}
	}
	_, _, _, err := readItems(strings.NewReader(`[1, 2`), "array", 0, 10)
	require.Error(t, err)
	_, _, _, err = readItems(strings.NewReader("1\n{oops"), "lines", 0, 10)
	require.Error(t, err)
}

type rawItem = json.RawMessage

var jsonUnmarshal = json.Unmarshal
