package client

import (
	"strings"
	"testing"
)

// FuzzReadEvents feeds arbitrary bytes as an event stream: readEvents must not
// panic, and what it delivers must be the events after last, each once, in seq
// order, with none missing.
func FuzzReadEvents(f *testing.F) {
	event := func(seq, typ string) string {
		return "id: " + seq + "\nevent: " + typ + "\ndata: {\"seq\":" + seq + ",\"type\":\"" + typ + "\",\"data\":{},\"created_at\":\"2026-01-01T00:00:00Z\"}\n\n"
	}
	f.Add(": stream\n\n"+event("1", "run.created")+event("2", "run.succeeded"), int64(0))
	f.Add(event("3", "step.started")+event("4", "step.succeeded")+event("6", "run.failed"), int64(2))
	f.Add(strings.ReplaceAll(event("1", "run.created"), "\n", "\r\n"), int64(0))
	f.Add("data: {\"seq\":1\ndata: ,\"type\":\"x\"}\n\n", int64(0))
	f.Add("\xef\xbb\xbfdata: {}\n\n:\n\nretry: 10\n\nid\n\n", int64(0))
	f.Add("data: {\"seq\":1,\"type\":\"run.canceled\"}\r\rdata: {\"seq\":2}\n\n", int64(0))
	f.Fuzz(func(t *testing.T, stream string, after int64) {
		if after < 0 {
			after = -after
		}
		last := after
		var got []int64
		final, err := readEvents(strings.NewReader(stream), &last, func(ev *Event) error {
			got = append(got, ev.Seq)
			return nil
		})
		for i, seq := range got {
			if seq != after+int64(i)+1 {
				t.Fatalf("delivered %v after %d: not each event once, in order", got, after)
			}
		}
		if len(got) > 0 && last != got[len(got)-1] {
			t.Fatalf("last %d after delivering %v", last, got)
		}
		if final && err != nil {
			t.Fatalf("final with error %v", err)
		}
	})
}
