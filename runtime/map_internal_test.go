package runtime

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// readItems reads a page of up to n items from r with no read-ahead, as
// mapPage's first read does: the items as a JSON array, the offset after the
// last one, and whether the blob ended.
func readItems(r io.Reader, format string, base int64, n int) (json.RawMessage, int64, bool, error) {
	list, ends, end, err := readItemList(r, format, base, n, n, 0)
	if err != nil {
		return nil, 0, false, err
	}
	next := base
	if len(ends) > 0 {
		next = ends[len(ends)-1]
	}
	return itemArray(list), next, end, nil
}

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

// FuzzReadItems: whatever a blob holds (a function's output, untrusted), reading it
// a page at a time from the cursors readItems returns gives the same items as
// reading it in one page, or an error; never a panic, never an item twice.
func FuzzReadItems(f *testing.F) {
	for _, seed := range []string{`[1, 2, 3]`, "1\n2\n3\n", `[{"a": "]"}, ",", []]`, `[`, "\"x\"\n{", ``, ` [ ] `} {
		f.Add([]byte(seed), true, uint8(1))
		f.Add([]byte(seed), false, uint8(2))
	}
	f.Fuzz(func(t *testing.T, blob []byte, array bool, page uint8) {
		format := "lines"
		if array {
			format = "array"
		}
		n := int(page%7) + 1
		whole, _, wholeEnd, wholeErr := readItems(strings.NewReader(string(blob)), format, 0, len(blob)+1)
		var got []json.RawMessage
		var off int64
		for round := 0; round <= len(blob)+1; round++ {
			items, next, end, err := readItems(strings.NewReader(string(blob[off:])), format, off, n)
			if err != nil {
				return // the whole read may have failed further on, or the same place
			}
			var arr []json.RawMessage
			if err := json.Unmarshal(items, &arr); err != nil {
				t.Fatalf("page is not a JSON array: %s", items)
			}
			got = append(got, arr...)
			if next < off || next > int64(len(blob)) {
				t.Fatalf("cursor %d out of [%d, %d]", next, off, len(blob))
			}
			if end {
				if wholeErr != nil || !wholeEnd {
					return // the single read saw an error the pages did not reach
				}
				var all []json.RawMessage
				if err := json.Unmarshal(whole, &all); err != nil {
					t.Fatalf("whole is not a JSON array: %s", whole)
				}
				if len(all) != len(got) {
					t.Fatalf("%d items by pages of %d, %d at once", len(got), n, len(all))
				}
				return
			}
			if next == off && len(arr) == 0 {
				t.Fatalf("no progress at %d", off)
			}
			off = next
		}
		t.Fatalf("more rounds than bytes")
	})
}

// TestMapNudgeInstance: an instance that ends names its own map to the map loop
// (its key without the "[index]" cairn_map_expand gave it), once however many of
// its instances end; a key that is no instance's asks for every open map.
func TestMapNudgeInstance(t *testing.T) {
	t.Parallel()
	d := &Dispatcher{hints: hints{maps: make(chan struct{}, 1)}}
	run := uuid.New()
	d.mapNudgeInstance(run, "each[3]")
	d.mapNudgeInstance(run, "each[4]")
	d.mapNudgeInstance(run, "a[b][12]")
	require.Len(t, d.hints.maps, 1, "the loop is woken")
	refs, all := d.mapTake()
	require.False(t, all)
	require.ElementsMatch(t, []catalog.MapRef{{RunID: run, Key: "each"}, {RunID: run, Key: "a[b]"}}, refs)

	refs, all = d.mapTake()
	require.Empty(t, refs, "taken once")
	require.False(t, all)

	d.mapNudgeInstance(run, "plain")
	refs, all = d.mapTake()
	require.Empty(t, refs)
	require.True(t, all, "no map named: every open map")
}

// TestMapItemsReadAhead: pages of a blob map taken through the items cache (as
// the map loop and the finishes that create instances take them) give every
// item once, in order, with the end seen, for any page size and read-ahead, and
// the blob is read once per read-ahead, not once per page; a cursor the cache
// has not reached (another dispatcher moved it) reads the blob again.
func TestMapItemsReadAhead(t *testing.T) {
	t.Parallel()
	var lines, array strings.Builder
	array.WriteString("[")
	var want []string
	for i := range 2500 {
		item := fmt.Sprintf(`{"i":%d}`, i)
		want = append(want, item)
		lines.WriteString(item + "\n")
		if i > 0 {
			array.WriteString(" ,")
		}
		array.WriteString(item)
	}
	array.WriteString("]")
	for _, blob := range []struct{ format, body string }{{"lines", lines.String()}, {"array", array.String()}} {
		for _, page := range []int{1, 7, 1000} {
			var c mapItemsCache
			opens := 0
			open := countingOpen(blob.body, &opens)
			st := &catalog.MapState{BlobKey: "payloads/u/x", BlobFormat: blob.format}
			var got []string
			for round := 0; ; round++ {
				require.Less(t, round, 3000)
				items, next, end, err := c.page(st, page, open)
				require.NoError(t, err)
				var arr []rawItem
				require.NoError(t, jsonUnmarshal(items, &arr))
				require.LessOrEqual(t, len(arr), page)
				for _, it := range arr {
					got = append(got, string(it))
				}
				st.NextOffset = next
				if end {
					break
				}
			}
			require.Equal(t, want, got, "%s, pages of %d", blob.format, page)
			require.LessOrEqual(t, opens, 2500/mapReadAhead+2, "%s, pages of %d: the blob read once per read-ahead", blob.format, page)
			if page == 1 {
				require.Greater(t, opens, 1, "2,500 items are more than one read-ahead")
			}
		}
		// A cursor elsewhere than where the cache stands reads the blob.
		var c mapItemsCache
		opens := 0
		open := countingOpen(blob.body, &opens)
		st := &catalog.MapState{BlobKey: "payloads/u/y", BlobFormat: blob.format}
		_, next, _, err := c.page(st, 1, open)
		require.NoError(t, err)
		_, next2, _, err := c.page(&catalog.MapState{BlobKey: st.BlobKey, BlobFormat: blob.format, NextOffset: next}, 1, open)
		require.NoError(t, err)
		require.Equal(t, 1, opens, "the second item comes from the cache")
		items, _, _, err := c.page(&catalog.MapState{BlobKey: st.BlobKey, BlobFormat: blob.format, NextOffset: 0}, 1, open)
		require.NoError(t, err)
		require.Equal(t, 2, opens, "the first item again: the blob is read")
		require.JSONEq(t, "["+want[0]+"]", string(items))
		require.Greater(t, next2, next)
	}
}

// countingOpen opens body at an offset, as a blob store would, counting the opens.
func countingOpen(body string, opens *int) func(int64) (io.ReadCloser, error) {
	return func(off int64) (io.ReadCloser, error) {
		*opens++
		return io.NopCloser(strings.NewReader(body[off:])), nil
	}
}
