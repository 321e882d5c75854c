package ui

import (
	"fmt"
	"sort"

	"github.com/cairnrun/cairn/client"
)

// graph is a run's steps laid out for SVG: layers left to right (a step's layer is
// the longest chain of needs above it), each layer's nodes ordered by the mean
// position of what they need (one barycentre pass), so edges cross less.
type graph struct {
	Nodes         []node
	Edges         []edge
	Width, Height int
}

type node struct {
	Key, Status, Label string
	// State is the visual state beyond the status (nodeState: wait-signal,
	// blocked, working, …); Phase the step's phase; Badge marks a failure
	// handler (↺ a compensation, ! on_failure).
	State, Phase, Badge string
	Attempts, Max       int64
	X, Y                int
	// Map is a started map step's progress, drawn in its one node (nil for
	// other steps).
	Map *mapView
}

// mapView is a map step's progress as its node shows it: a line of text and a bar
// of the finished instances.
type mapView struct {
	Text string  `json:"text"`
	Frac float64 `json:"frac"` // finished instances over the total (or over those created, before the total is known)
	BarW int     `json:"bar_w"`
}

// mapViewOf describes a map step's progress as the CLI does: "17/20 ✓ 3 ✗" (the
// total is "n+" until every item has its instance), and how many run.
func mapViewOf(m *client.MapProgress) *mapView {
	if m == nil {
		return nil
	}
	done := m.Succeeded + m.Failed
	denom := m.Created
	if m.Total != nil {
		denom = *m.Total
	}
	text := mapCount(m)
	if m.Running > 0 {
		text += fmt.Sprintf(" · %d running", m.Running)
	}
	v := &mapView{Text: text, Frac: 1}
	if denom > 0 {
		v.Frac = float64(done) / float64(denom)
	}
	v.BarW = int(v.Frac * (nodeW - 8))
	return v
}

type edge struct {
	From, To string
	Undo     bool // into a compensation
	Path     string
}

// Sizes of the drawing, in SVG user units.
const (
	nodeW   = 150
	nodeH   = 34
	layerDX = 200
	rowDY   = 46
	margin  = 10
	labelN  = 20 // characters of a key shown in its node
)

func layout(steps []client.Step) *graph {
	index := make(map[string]int, len(steps))
	for i, st := range steps {
		index[st.Key] = i
	}
	layer := make([]int, len(steps))
	done := make([]bool, len(steps))
	var depth func(i int, seen map[int]bool) int
	depth = func(i int, seen map[int]bool) int {
		if done[i] {
			return layer[i]
		}
		if seen[i] { // a cycle cannot be deployed; guard anyway
			return 0
		}
		seen[i] = true
		d := 0
		for _, n := range deref(steps[i].Needs) {
			if j, ok := index[n]; ok {
				d = max(d, depth(j, seen)+1)
			}
		}
		layer[i], done[i] = d, true
		return d
	}
	for i := range steps {
		depth(i, map[int]bool{})
	}
	var layers [][]int
	for i, l := range layer {
		for len(layers) <= l {
			layers = append(layers, nil)
		}
		layers[l] = append(layers[l], i)
	}
	row := make([]float64, len(steps))
	for l, members := range layers {
		if l > 0 {
			bary := make(map[int]float64, len(members))
			for _, i := range members {
				var sum float64
				var n int
				for _, need := range deref(steps[i].Needs) {
					if j, ok := index[need]; ok {
						sum += row[j]
						n++
					}
				}
				if n > 0 {
					bary[i] = sum / float64(n)
				}
			}
			sort.SliceStable(members, func(a, b int) bool { return bary[members[a]] < bary[members[b]] })
		}
		for r, i := range members {
			row[i] = float64(r)
		}
	}
	g := &graph{}
	tallest := 0
	for _, m := range layers {
		tallest = max(tallest, len(m))
	}
	pos := make([][2]int, len(steps))
	for l, members := range layers {
		// Centre shorter layers against the tallest.
		off := (tallest - len(members)) * rowDY / 2
		for r, i := range members {
			x, y := margin+l*layerDX, margin+off+r*rowDY
			pos[i] = [2]int{x, y}
			st := steps[i]
			label := st.Key
			if len([]rune(label)) > labelN {
				label = string([]rune(label)[:labelN-1]) + "…"
			}
			badge := map[client.StepPhase]string{client.Compensate: "↺ ", client.OnFailure: "! "}[st.Phase]
			g.Nodes = append(g.Nodes, node{Key: st.Key, Status: string(st.Status), Label: label, Attempts: st.Attempts, Max: st.MaxAttempts, X: x, Y: y, Map: mapViewOf(st.Map),
				State: nodeState(st), Phase: string(st.Phase), Badge: badge})
		}
	}
	for i, st := range steps {
		for _, n := range deref(st.Needs) {
			j, ok := index[n]
			if !ok {
				continue
			}
			x1, y1 := pos[j][0]+nodeW, pos[j][1]+nodeH/2
			x2, y2 := pos[i][0], pos[i][1]+nodeH/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, edge{From: n, To: st.Key, Undo: st.Phase == client.Compensate, Path: fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)})
		}
	}
	g.Width = 2*margin + max(0, len(layers)-1)*layerDX + nodeW
	g.Height = 2*margin + max(0, tallest-1)*rowDY + nodeH
	return g
}
