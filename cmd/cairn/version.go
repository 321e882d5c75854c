package main

import "runtime/debug"

// buildVersion, when the linker sets it (go build -ldflags "-X
// main.buildVersion=v1.4.0"), is the binary's version: a release build's name.
var buildVersion string

// binaryVersion names this binary: buildVersion if set, else the commit it was
// built from (12 hex digits, "+dirty" when the work tree had changes), else the
// module's version, else "devel". The servers' registry records it (cairn
// servers).
func binaryVersion() string {
	if buildVersion != "" {
		return buildVersion
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		return rev[:min(12, len(rev))] + dirty
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	return "devel"
}
