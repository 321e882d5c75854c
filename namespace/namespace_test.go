package namespace

import "testing"

func TestQualifyAndSplit(t *testing.T) {
	for _, c := range []struct{ ns, name, key string }{
		{Default, "hello", "hello"},
		{"", "hello", "hello"},
		{"acme", "hello", "acme/hello"},
		{"acme", "order.paid", "acme/order.paid"},
		{"acme", "", ""},
	} {
		if got := Qualify(c.ns, c.name); got != c.key {
			t.Errorf("Qualify(%q, %q) = %q, want %q", c.ns, c.name, got, c.key)
		}
		if c.name == "" {
			continue
		}
		wantNS := c.ns
		if wantNS == "" {
			wantNS = Default
		}
		if ns, name := Split(c.key); ns != wantNS || name != c.name {
			t.Errorf("Split(%q) = %q, %q; want %q, %q", c.key, ns, name, wantNS, c.name)
		}
		if Strip(c.key) != c.name || Of(c.key) != wantNS {
			t.Errorf("Strip/Of(%q) = %q/%q", c.key, Strip(c.key), Of(c.key))
		}
	}
}

func TestCheck(t *testing.T) {
	for _, ok := range []string{"default", "acme", "a", "team-1", "abcdefghijklmnopqrstuvwxyz01234"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Acme", "-a", "a/b", "a.b", "abcdefghijklmnopqrstuvwxyz012345"} {
		if Check(bad) == nil {
			t.Errorf("Check(%q) accepted a bad name", bad)
		}
	}
}
