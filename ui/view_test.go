package ui

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

func TestLineDiff(t *testing.T) {
	got := lineDiff("a\nb\nc\nd", "a\nc\nx\nd")
	require.Equal(t, []diffLine{{" ", "a"}, {"-", "b"}, {" ", "c"}, {"+", "x"}, {" ", "d"}}, got)
	require.Equal(t, []diffLine{{" ", "same"}}, lineDiff("same", "same"))
	require.Equal(t, []diffLine{{"-", "a"}, {"+", "b"}}, lineDiff("a", "b"))
}

func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) *time.Time { v := t0.Add(time.Duration(ms) * time.Millisecond); return &v }
	steps := []client.Step{
		{Key: "split", Status: "succeeded", ReadyAt: at(0), StartedAt: at(0), FinishedAt: at(100)},
		{Key: "join", Status: "running", ReadyAt: at(400), StartedAt: at(500)},
		{Key: "later", Status: "waiting"},
	}
	for i := 1; i <= 8; i++ {
		steps = append(steps, client.Step{Key: fmt.Sprintf("part-%d", i), Status: "succeeded", ReadyAt: at(100), StartedAt: at(100 + i), FinishedAt: at(300 + i)})
	}
	tv := timeline(steps, nil, *at(1000))
	require.Len(t, tv.Bars, 10, "one bar per started step")
	require.Equal(t, "split", tv.Bars[0].Key)
	require.Equal(t, "join", tv.Bars[9].Key, "ordered by start")
	require.Equal(t, "1s", tv.Span)
	require.InDelta(t, 300.0, tv.Bars[9].X, 0.01)
	require.InDelta(t, 300.0, tv.Bars[9].W, 0.01, "a running step's bar ends now")
	require.InDelta(t, 240.0, tv.Bars[9].WaitX, 0.01)
	require.InDelta(t, 60.0, tv.Bars[9].WaitW, 0.01, "waited from ready to start")
	require.Zero(t, tv.Bars[0].WaitW)
	for i, b := range tv.Bars {
		require.Equal(t, float64(i*18), b.Y, "a row each")
	}
	require.Nil(t, timeline(steps[2:3], nil, *at(0)), "nothing started: no timeline")

	// A step of two attempts: a segment each, the backoff between them empty.
	steps[0].Attempts = 2
	tv = timeline(steps, map[string][]client.Attempt{"split": {
		{Number: 1, Status: "failed", StartedAt: *at(0), FinishedAt: at(20)},
		{Number: 2, Status: "succeeded", StartedAt: *at(50), FinishedAt: at(100)},
	}}, *at(1000))
	require.Len(t, tv.Bars[0].Attempts, 2)
	require.InDelta(t, 30.0, tv.Bars[0].Attempts[1].X, 0.01)
	require.InDelta(t, 30.0, tv.Bars[0].Attempts[1].W, 0.01)
	require.Contains(t, tv.Bars[0].Label, "2 attempts")
}

func TestCollapse(t *testing.T) {
	var d []diffLine
	for i := range 20 {
		d = append(d, diffLine{" ", fmt.Sprint(i)})
	}
	d[10] = diffLine{"+", "x"}
	got := collapse(d)
	require.Equal(t, []diffLine{{"@", "… 7 unchanged lines"}, {" ", "7"}, {" ", "8"}, {" ", "9"}, {"+", "x"},
		{" ", "11"}, {" ", "12"}, {" ", "13"}, {"@", "… 6 unchanged lines"}}, got)
	require.Equal(t, []diffLine{{"@", "… 2 unchanged lines"}}, collapse(d[:2]), "no change at all")
}

func TestMapNode(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		m    *client.MapProgress
		text string
		barW int
	}{
		{"expanding", &client.MapProgress{Created: 4, Succeeded: 1, Running: 3}, "1/4+ ✓ · 3 running", 35},
		{"with failures", &client.MapProgress{Created: 10, Total: n(10), Succeeded: 7, Failed: 1, Running: 2}, "7/10 ✓ 1 ✗ · 2 running", 113},
		{"done", &client.MapProgress{Created: 5, Total: n(5), Succeeded: 5}, "5/5 ✓", nodeW - 8},
		{"empty", &client.MapProgress{Total: n(0)}, "0/0 ✓", nodeW - 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := mapViewOf(tt.m)
			require.Equal(t, tt.text, v.Text)
			require.Equal(t, tt.barW, v.BarW)
		})
	}
	g := layout([]client.Step{{Key: "split"}, {Key: "each", Needs: &[]string{"split"}, Map: &client.MapProgress{Created: 2}}})
	require.Nil(t, g.Nodes[0].Map)
	require.Equal(t, "0/2+ ✓", g.Nodes[1].Map.Text)
}
