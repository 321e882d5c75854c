package blobstore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Key layout: "<kind>/sha256/<hex>", the content address, or "<kind>/u/<hex>",
// an object written once under a random name of its own whose content the
// catalog records by digest (see PutOptions.Index). The kind is a short
// lower-case word, the hex always 64 lower-case digits, so a key is also a safe
// relative file path.
const (
	keyAlgo       = "/sha256/"
	keyUnique     = "/u/"
	maxKindLength = 32
)

// DigestPrefix begins every digest: "sha256:<hex>".
const DigestPrefix = "sha256:"

// KeyPrefix returns what every key of kind begins with, "<kind>/sha256/": the
// key of a digest is KeyPrefix followed by the digest without DigestPrefix. The
// catalog's blob collector builds keys so in SQL, from the digests of the
// references it finds; everything else calls KeyFor or Ref.Key.
func KeyPrefix(kind string) string { return kind + keyAlgo }

// Kinds of objects: the first part of every key (see KeyFor).
const (
	// KindBundles holds canonical bundle archives, named by their tree digest.
	KindBundles = "bundles"
	// KindPayloads holds outputs and checkpoints over the inline limit. One kind for
	// both, so a reference's digest alone names its object, and identical payloads
	// share it.
	KindPayloads = "payloads"
	// KindLogs holds attempts' logs (an exec handler's stderr).
	KindLogs = "logs"
	// KindArchives holds archives of runs deleted by retention (JSON Lines of the
	// run, its steps, attempts and events), named in archived_runs.
	KindArchives = "archives"
)

// KeyFor returns the key "<kind>/sha256/<hex>" of digest ("sha256:<hex>") in kind.
// ErrInvalidKey when kind is not ^[a-z][a-z0-9-]{0,31}$ or digest is not
// "sha256:" and 64 lower-case hex digits.
func KeyFor(kind, digest string) (string, error) {
	if err := checkKind(kind); err != nil {
		return "", err
	}
	hexDigest, err := digestHex(digest)
	if err != nil {
		return "", err
	}
	return kind + keyAlgo + hexDigest, nil
}

// ParseKey splits a key "<kind>/sha256/<hex>" into its kind and digest
// ("sha256:<hex>"); a key "<kind>/u/<hex>" (a name of its own, see
// PutOptions.Index) has an empty digest: its content is known to the catalog,
// not to the key. It accepts exactly the keys KeyFor and a Put return and
// nothing else (no "..", no upper case, no extra segments): ErrInvalidKey
// otherwise.
func ParseKey(key string) (kind, digest string, err error) {
	kind, hexName, unique, err := SplitKey(key)
	if err != nil || unique {
		return kind, "", err
	}
	return kind, DigestPrefix + hexName, nil
}

// SplitKey splits a key of either form into its kind, its 64 hex digits, and
// whether it is a name of its own ("<kind>/u/<hex>") rather than a content
// address; ErrInvalidKey as ParseKey.
func SplitKey(key string) (kind, hexName string, unique bool, err error) {
	kind, rest, ok := strings.Cut(key, keyAlgo)
	if !ok {
		kind, rest, ok = strings.Cut(key, keyUnique)
		unique = true
	}
	if !ok || checkKind(kind) != nil || !isHex64(rest) {
		return "", "", false, fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return kind, rest, unique, nil
}

// newUniqueKey returns a fresh "<kind>/u/<hex>": 32 random bytes.
func newUniqueKey(kind string) (string, error) {
	if err := checkKind(kind); err != nil {
		return "", err
	}
	var b [sha256.Size]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("unique key: %w", err)
	}
	return kind + keyUnique + hex.EncodeToString(b[:]), nil
}

// checkKind reports whether kind matches ^[a-z][a-z0-9-]{0,31}$.
func checkKind(kind string) error {
	if len(kind) == 0 || len(kind) > maxKindLength || kind[0] < 'a' || kind[0] > 'z' {
		return fmt.Errorf("%w: kind %q", ErrInvalidKey, kind)
	}
	for i := 1; i < len(kind); i++ {
		c := kind[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Errorf("%w: kind %q", ErrInvalidKey, kind)
		}
	}
	return nil
}

// digestHex returns the hex part of "sha256:<64 lower-case hex>".
func digestHex(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, DigestPrefix)
	if !ok || !isHex64(h) {
		return "", fmt.Errorf("%w: digest %q", ErrInvalidKey, digest)
	}
	return h, nil
}

func isHex64(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
