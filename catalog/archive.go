package catalog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
)

// Archive is a run as retention archives it before deleting it: the run, its
// steps, their attempts and the run's events, as the catalog held them.
type Archive struct {
	Run      Run
	Steps    []Step
	Attempts []Attempt
	Events   []Event
}

// archiveLine is one line of an archive's JSON Lines: a kind and one row.
type archiveLine struct {
	Kind    string   `json:"kind"` // run, step, attempt or event
	Run     *Run     `json:"run,omitempty"`
	Step    *Step    `json:"step,omitempty"`
	Attempt *Attempt `json:"attempt,omitempty"`
	Event   *Event   `json:"event,omitempty"`
}

// RunArchive reads run id whole: its row, steps, attempts and events.
func (s *Store) RunArchive(ctx context.Context, id uuid.UUID) (*Archive, error) {
	run, err := s.RunGet(ctx, id)
	if err != nil {
		return nil, err
	}
	a := &Archive{Run: *run}
	if a.Steps, err = s.StepList(ctx, id); err != nil {
		return nil, err
	}
	for _, st := range a.Steps {
		att, err := s.AttemptList(ctx, id, st.Key)
		if err != nil {
			return nil, err
		}
		a.Attempts = append(a.Attempts, att...)
	}
	const page = 1000
	for after := int64(0); ; {
		ev, err := s.EventList(ctx, id, after, page)
		if err != nil {
			return nil, err
		}
		a.Events = append(a.Events, ev...)
		if len(ev) < page {
			break
		}
		after = ev[len(ev)-1].Seq
	}
	return a, nil
}

// WriteTo writes a as JSON Lines: the run first, then the steps, the attempts
// and the events, one row a line.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	enc := json.NewEncoder(cw)
	if err := enc.Encode(archiveLine{Kind: "run", Run: &a.Run}); err != nil {
		return cw.n, err
	}
	for i := range a.Steps {
		if err := enc.Encode(archiveLine{Kind: "step", Step: &a.Steps[i]}); err != nil {
			return cw.n, err
		}
	}
	for i := range a.Attempts {
		if err := enc.Encode(archiveLine{Kind: "attempt", Attempt: &a.Attempts[i]}); err != nil {
			return cw.n, err
		}
	}
	for i := range a.Events {
		if err := enc.Encode(archiveLine{Kind: "event", Event: &a.Events[i]}); err != nil {
			return cw.n, err
		}
	}
	return cw.n, nil
}

// ReadArchive reads what Archive.WriteTo wrote.
func ReadArchive(r io.Reader) (*Archive, error) {
	var a Archive
	seenRun := false
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var l archiveLine
		if err := dec.Decode(&l); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("read archive: %w", err)
		}
		switch {
		case l.Kind == "run" && l.Run != nil:
			a.Run, seenRun = *l.Run, true
		case l.Kind == "step" && l.Step != nil:
			a.Steps = append(a.Steps, *l.Step)
		case l.Kind == "attempt" && l.Attempt != nil:
			a.Attempts = append(a.Attempts, *l.Attempt)
		case l.Kind == "event" && l.Event != nil:
			a.Events = append(a.Events, *l.Event)
		default:
			return nil, fmt.Errorf("read archive: unknown line kind %q", l.Kind)
		}
	}
	if !seenRun {
		return nil, errors.New("read archive: no run line")
	}
	return &a, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
