package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

const sqlEventList = `
SELECT run_id, seq, type, coalesce(step_key, '') AS step_key, coalesce(attempt, 0) AS attempt, data, created_at
FROM events WHERE run_id = $1 AND seq > $2
ORDER BY seq
LIMIT $3`

// Event is an entry of a run's history. Seq numbers a run's events 1, 2, 3, … in
// commit order, without gaps.
type Event struct {
	RunID     uuid.UUID `db:"run_id"`
	Seq       int64     `db:"seq"`
	Type      EventType `db:"type"`
	StepKey   string    `db:"step_key"`
	Attempt   int       `db:"attempt"`
	Data      JSON      `db:"data"`
	CreatedAt time.Time `db:"created_at"`
}

// EventList returns up to limit events of a run with seq greater than after.
func (s *Store) EventList(ctx context.Context, runID uuid.UUID, after int64, limit int) ([]Event, error) {
	var out []Event
	if err := s.db.SelectContext(ctx, &out, sqlEventList, runID, after, limit); err != nil {
		return nil, fmt.Errorf("list events of run %s: %w", runID, translateError(err))
	}
	return out, nil
}

// EventValueShown is the size, in bytes, of the largest value an event's data
// shows whole: a larger one shows only its size. 1 KiB.
const EventValueShown = 1 << 10

// CheckpointEventData returns the data of the step.checkpointed event of a stored
// checkpoint (inline JSON or a $blob reference): {"checkpoint": stored} up to
// EventValueShown bytes, else {"size": n}.
func CheckpointEventData(stored json.RawMessage) json.RawMessage {
	if len(stored) > EventValueShown {
		return json.RawMessage(fmt.Sprintf(`{"size":%d}`, len(stored)))
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"checkpoint": stored})
	return b
}
