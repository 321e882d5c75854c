package ui

import (
	"fmt"
	"html/template"
	"time"

	"github.com/google/uuid"
	openapi_types "github.com/oapi-codegen/runtime/types"
)

// when writes a time for people: a <time> element whose text is the time in UTC
// and how long ago (or in how long) it is, with the UTC time on hover; the page's
// script rewrites the text in the browser's own time zone. Empty for no time.
func when(t any) template.HTML {
	var tm time.Time
	switch v := t.(type) {
	case time.Time:
		tm = v
	case *time.Time:
		if v != nil {
			tm = *v
		}
	}
	if tm.IsZero() {
		return ""
	}
	utc := tm.UTC().Format("2006-01-02 15:04:05Z")
	return template.HTML(`<time datetime="` + tm.UTC().Format(time.RFC3339Nano) + `" title="` + utc + `">` + //nolint:gosec // digits and punctuation only
		utc + ` <span class="rel">(` + relativeTo(tm, time.Now()) + `)</span></time>`)
}

// relativeTo says "3m ago" or "in 20h".
func relativeTo(t, now time.Time) string {
	d := t.Sub(now)
	if d >= 0 {
		return "in " + roughly(d)
	}
	return roughly(-d) + " ago"
}

// roughly rounds a duration for reading: 12s, 3m, 5h, 2d.
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// parseUUID reads a run ID.
func parseUUID(s string) (openapi_types.UUID, error) {
	id, err := uuid.Parse(s)
	return openapi_types.UUID(id), err
}
