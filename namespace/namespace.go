// Package namespace names the namespaces of a Cairn and keys their objects.
//
// An object of a namespace other than Default (a workflow, and so its versions,
// aliases, runs and schedules; a secret; a limit; a received event, and the event
// names a definition waits for or is triggered by) is keyed "namespace/name" in the
// catalog; an object of Default keeps its bare name, so a Cairn that never made a
// namespace has the keys it always had. A name of the API never holds '/': the API
// qualifies the names that come in (Qualify) and strips the ones that go out
// (Strip). No name of any of those objects may hold '/', so a key says its
// namespace unambiguously.
package namespace

import (
	"fmt"
	"regexp"
	"strings"
)

// Default is the namespace of every object made without one; /v1/… without a
// Cairn-Namespace header is Default.
const Default = "default"

// Header is the request header that selects a namespace (for a token that may use
// more than one); the CLI's --namespace and CAIRN_NAMESPACE set it.
const Header = "Cairn-Namespace"

// Pattern is what a namespace's name may be: 1 to 31 lower-case letters, digits and
// '-', starting with a letter or digit.
var Pattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,30}$`)

// Check returns an error that says why ns is not a namespace's name, or nil.
func Check(ns string) error {
	if !Pattern.MatchString(ns) {
		return fmt.Errorf("namespace %q must be 1 to 31 lower-case letters, digits and '-', starting with a letter or digit", ns)
	}
	return nil
}

// Qualify is the catalog's key of name in namespace ns: name itself in Default (or
// for ns ""), "ns/name" otherwise. An empty name stays empty (an unset filter).
func Qualify(ns, name string) string {
	if ns == "" || ns == Default || name == "" {
		return name
	}
	return ns + "/" + name
}

// Split returns the namespace and the name of a catalog key.
func Split(key string) (ns, name string) {
	if ns, name, ok := strings.Cut(key, "/"); ok {
		return ns, name
	}
	return Default, key
}

// Of is the namespace of a catalog key.
func Of(key string) string {
	ns, _ := Split(key)
	return ns
}

// Strip is the name of a catalog key without its namespace.
func Strip(key string) string {
	_, name := Split(key)
	return name
}
