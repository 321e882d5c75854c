package ui

import (
	"net/http"
	"strings"

	"github.com/cairnrun/cairn/client"
)

// eventWait is a wait_for_event step's definition: the event it waits for and
// the match an event of that name must satisfy ("" for any).
type eventWait struct {
	Event string `json:"event"`
	Match string `json:"match"`
}

// eventWaitOf returns what step st of run waits for when it is a wait_for_event
// step (a map's instance by its map step's definition); nil for another step, or
// when the run's version cannot be read.
func (h *Handler) eventWaitOf(r *http.Request, s *session, run *client.Run, st client.Step) *eventWait {
	if st.WaitingFor == nil || st.WaitingFor.Kind != client.WaitingForKindEvent {
		return nil
	}
	def := h.definition(r, s, run)
	if def == nil {
		return nil
	}
	key, _, _ := strings.Cut(st.Key, "[")
	for _, d := range def.Steps {
		if d.Key == key && d.WaitForEvent != nil {
			return d.WaitForEvent
		}
	}
	return nil
}
