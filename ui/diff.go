package ui

import (
	"fmt"
	"strings"
)

// diffLine is one line of a line diff: Op is " " (in both), "-" (only in the old
// text) or "+" (only in the new).
type diffLine struct {
	Op, Text string
}

// maxDiffLines bounds the texts diffLines compares (the LCS table is their product).
const maxDiffLines = 4000

// lineDiff compares two texts line by line (a longest common subsequence), for the
// diff of two versions' definitions. Texts longer than maxDiffLines lines are
// compared as wholly removed and added.
func lineDiff(a, b string) []diffLine {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(x) > maxDiffLines || len(y) > maxDiffLines {
		out := make([]diffLine, 0, len(x)+len(y))
		for _, l := range x {
			out = append(out, diffLine{"-", l})
		}
		for _, l := range y {
			out = append(out, diffLine{"+", l})
		}
		return out
	}
	// lcs[i][j] is the LCS length of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		switch {
		case x[i] == y[j]:
			out = append(out, diffLine{" ", x[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{"-", x[i]})
			i++
		default:
			out = append(out, diffLine{"+", y[j]})
			j++
		}
	}
	for ; i < len(x); i++ {
		out = append(out, diffLine{"-", x[i]})
	}
	for ; j < len(y); j++ {
		out = append(out, diffLine{"+", y[j]})
	}
	return out
}

// diffContext is how many unchanged lines a shown diff keeps around each change.
const diffContext = 3

// collapse replaces each run of unchanged lines longer than twice diffContext,
// beyond diffContext lines of each change, by one line "@" saying how many it hides.
func collapse(d []diffLine) []diffLine {
	var out []diffLine
	for i := 0; i < len(d); {
		if d[i].Op != " " {
			out = append(out, d[i])
			i++
			continue
		}
		j := i
		for j < len(d) && d[j].Op == " " {
			j++
		}
		keepHead, keepTail := diffContext, diffContext
		if i == 0 {
			keepHead = 0
		}
		if j == len(d) {
			keepTail = 0
		}
		if j-i <= keepHead+keepTail+1 {
			out = append(out, d[i:j]...)
		} else {
			out = append(out, d[i:i+keepHead]...)
			out = append(out, diffLine{"@", fmt.Sprintf("… %d unchanged lines", j-i-keepHead-keepTail)})
			out = append(out, d[j-keepTail:j]...)
		}
		i = j
	}
	return out
}
