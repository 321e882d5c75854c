package catalog_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

func TestRunLookup(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})
	id := run.ID.String()
	tests := []struct {
		name  string
		short string
		want  []uuid.UUID
	}{
		{"whole", id, []uuid.UUID{run.ID}},
		{"short ID, as the UI shows it", id[len(id)-12:], []uuid.UUID{run.ID}},
		{"with spaces, in capitals", "  " + strings.ToUpper(id[len(id)-12:]) + " ", []uuid.UUID{run.ID}},
		{"first digits, as the CLI prints them", id[:23], []uuid.UUID{run.ID}},
		{"unknown short ID", "000000000000", nil},
		{"unknown whole ID", uuid.NewString(), nil},
		{"too short", id[:6], nil},
		{"not hex", "zzzzzzzzzzzz", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.RunLookup(ctx, tt.short, 5, "")
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
