package ui

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLineDiff(t *testing.T) {
	got := lineDiff("a\nb\nc\nd", "a\nc\nx\nd")
	require.Equal(t, []diffLine{{" ", "a"}, {"-", "b"}, {" ", "c"}, {"+", "x"}, {" ", "d"}}, got)
	require.Equal(t, []diffLine{{" ", "same"}}, lineDiff("same", "same"))
	require.Equal(t, []diffLine{{"-", "a"}, {"+", "b"}}, lineDiff("a", "b"))
}
