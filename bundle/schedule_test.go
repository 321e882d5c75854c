package bundle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		schedules string
		field     string
		message   string
	}{
		{"bad cron", `[{name: n, cron: "61 * * * *"}]`, "schedules[0].cron", `schedule "n": invalid cron`},
		{"never fires", `[{name: n, cron: "0 0 30 2 *"}]`, "schedules[0].cron", "never fires"},
		{"missing cron", `[{name: n}]`, "schedules[0].cron", "required"},
		{"tz prefix", `[{name: n, cron: "CRON_TZ=UTC 0 * * * *"}]`, "schedules[0].cron", "time zone prefix"},
		{"unknown zone", `[{name: n, cron: "@hourly", timezone: Mars/Olympus}]`, "schedules[0].timezone", "unknown time zone"},
		{"duplicate", `[{name: n, cron: "@hourly"}, {name: n, cron: "@daily"}]`, "schedules[1].name", "duplicate schedule name"},
		{"bad name", `[{name: "N!", cron: "@hourly"}]`, "schedules[0].name", "must be"},
		{"bad overlap", `[{name: n, cron: "@hourly", overlap: queue}]`, "schedules[0].overlap", "unknown overlap"},
		{"negative catchup", `[{name: n, cron: "@hourly", catchup: -1h}]`, "schedules[0].catchup", "between 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest([]byte(minimalManifest + "schedules: " + tc.schedules + "\n"))
			require.NoError(t, err)
			errs := ValidationErrors(m.Validate(nil))
			require.Len(t, errs, 1, "%v", errs)
			require.Equal(t, tc.field, errs[0].Field)
			require.Contains(t, errs[0].Message, tc.message)
		})
	}
}

func TestScheduleNormalize(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(minimalManifest + `schedules:
  - {name: nightly, cron: "0 3 * * *", timezone: Europe/Paris, input: {a: 1}, overlap: allow, catchup: 1h}
  - {name: fast, cron: "*/5 * * * * *"}
  - {name: every, cron: "@every 1s"}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, []ScheduleDefinition{
		{Name: "nightly", Cron: "0 3 * * *", Timezone: "Europe/Paris", Input: map[string]any{"a": int64(1)},
			Overlap: OverlapAllow, Catchup: Duration(time.Hour), CatchupMS: 3600000},
		{Name: "fast", Cron: "*/5 * * * * *", Timezone: "UTC", Overlap: OverlapSkip},
		{Name: "every", Cron: "@every 1s", Timezone: "UTC", Overlap: OverlapSkip},
	}, def.Schedules)

	// A manifest without schedules keeps the fingerprint it had before schedules
	// existed: the field is absent from the definition's JSON.
	plain, err := ParseManifest([]byte(minimalManifest))
	require.NoError(t, err)
	pdef, err := plain.Normalize()
	require.NoError(t, err)
	b, err := pdef.CanonicalJSON()
	require.NoError(t, err)
	require.NotContains(t, string(b), "schedules")
}

// fires lists the fire times of expr in Europe/Paris after from, up to (excluded) to,
// as Paris wall times.
func fires(t *testing.T, expr string, from, to time.Time) []string {
	t.Helper()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	s, err := ParseCron(expr, paris)
	require.NoError(t, err)
	var out []string
	for at := from; ; {
		next, ok := NextFire(s, at)
		require.True(t, ok)
		if !next.Before(to) {
			return out
		}
		out = append(out, next.In(paris).Format("01-02 15:04 MST"))
		at = next
	}
}

func TestNextFireDaylightSaving(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	day := func(m time.Month, d int) time.Time { return time.Date(2026, m, d, 0, 0, 0, 0, paris) }

	// Spring forward, 2026-03-29: 02:00 CET becomes 03:00 CEST, so 02:30 does not
	// exist that day and the daily 02:30 does not fire on it.
	require.Equal(t, []string{"03-28 02:30 CET", "03-30 02:30 CEST", "03-31 02:30 CEST"},
		fires(t, "30 2 * * *", day(3, 28), day(4, 1)))
	// Hourly across the change: 23 fires that day, 01:00 then 03:00.
	spring := fires(t, "0 * * * *", day(3, 29).Add(-time.Nanosecond), day(3, 30))
	require.Len(t, spring, 23)
	require.Equal(t, []string{"03-29 00:00 CET", "03-29 01:00 CET", "03-29 03:00 CEST", "03-29 04:00 CEST"}, spring[:4])

	// Fall back, 2026-10-25: 03:00 CEST becomes 02:00 CET, so 02:00–02:59 happen
	// twice; the daily 02:30 fires at both instants, an hourly schedule 25 times.
	require.Equal(t, []string{"10-24 02:30 CEST", "10-25 02:30 CEST", "10-25 02:30 CET", "10-26 02:30 CET"},
		fires(t, "30 2 * * *", day(10, 24), day(10, 27)))
	fall := fires(t, "0 * * * *", day(10, 25).Add(-time.Nanosecond), day(10, 26))
	require.Len(t, fall, 25)
	require.Equal(t, []string{"10-25 01:00 CEST", "10-25 02:00 CEST", "10-25 02:00 CET", "10-25 03:00 CET"}, fall[1:5])

	// A fake clock in UTC: the fire after 2026-03-29T00:59:59Z (01:59:59 CET) of an
	// hourly schedule is 01:00Z (03:00 CEST), one real hour later.
	s, err := ParseCron("0 * * * *", paris)
	require.NoError(t, err)
	next, ok := NextFire(s, time.Date(2026, 3, 29, 0, 59, 59, 0, time.UTC))
	require.True(t, ok)
	require.Equal(t, time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), next)
	require.Equal(t, time.UTC, next.Location())
}
