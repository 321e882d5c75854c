// Package secrets keeps the values of PUT /v1/secrets/{name} encrypted at rest and is
// the one place that opens them again (a webhook's signature check; a step's env
// and http headers, docs/functions.md).
//
// A value is sealed with AES-256-GCM under the server's key (CAIRN_SECRET_KEY: 32
// bytes, base64) before it reaches the catalog, with a random 96-bit nonce and the
// secret's name as additional data (a value copied under another name does not open).
// Each stored version records the id of the key that sealed it (KeyID: a short hash
// of the key, never the key), so that a key can be rotated: configure the new key as
// the current one and the old one among the old keys (CAIRN_SECRET_KEYS_OLD); new
// versions are sealed with the current key, older ones still open with theirs, and
// once every secret has been set again the old key can go.
package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cairnrun/cairn/catalog"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// MaxValueSize bounds a secret's value, in bytes.
const MaxValueSize = 64 << 10

// Errors of the package; check with errors.Is.
var (
	// ErrNoKey means the server has no secret key configured: secrets can be neither
	// stored nor used.
	ErrNoKey = errors.New("secrets: no secret key configured: set CAIRN_SECRET_KEY (32 random bytes, base64; `openssl rand -base64 32`) on every server")
	// ErrUnknownKey means a version was sealed with a key the server does not have
	// (neither the current key nor an old one).
	ErrUnknownKey = errors.New("secrets: sealed with a key this server does not have")
	// ErrDecrypt means the ciphertext did not open with the key its id names: the
	// key is wrong (another key with a colliding id) or the row was altered.
	ErrDecrypt = errors.New("secrets: the value does not decrypt with the configured key (wrong key, or the stored value was altered)")
)

// Key is one AES-256 key and its id.
type Key struct {
	id   string
	aead cipher.AEAD
}

// ID names the key in stored versions: the first 8 bytes of SHA-256 over a fixed
// label and the key, in hex. It does not reveal the key.
func (k *Key) ID() string { return k.id }

// NewKey makes a Key of raw, which must be KeySize bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d", len(raw), KeySize)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret key: %w", err)
	}
	h := sha256.Sum256(append([]byte("cairn secret key id\x00"), raw...))
	return &Key{id: hex.EncodeToString(h[:8]), aead: aead}, nil
}

// ParseKey reads a key written in base64 (standard or URL alphabet, padded or not).
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			return NewKey(raw)
		}
	}
	return nil, errors.New("secret key: not base64 (want 32 random bytes in base64, e.g. `openssl rand -base64 32`)")
}

// GenerateKey returns a new random key in base64, as ParseKey reads it.
func GenerateKey() string {
	var b [KeySize]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// Keyring is the current key, which seals, and old keys, which only open. The zero
// value (and a nil *Keyring) has no key: every call fails with ErrNoKey. A Keyring is
// immutable and safe for concurrent use.
type Keyring struct {
	current *Key
	byID    map[string]*Key
}

// NewKeyring returns a keyring sealing with current and opening with current and old.
// A nil current makes a keyring without a key.
func NewKeyring(current *Key, old ...*Key) *Keyring {
	k := &Keyring{current: current, byID: map[string]*Key{}}
	for _, o := range old {
		k.byID[o.id] = o
	}
	if current != nil {
		k.byID[current.id] = current
	}
	return k
}

// ParseKeyring reads the current key and a comma-separated list of old keys, each
// base64. An empty current gives a keyring without a key (old keys need a current one).
func ParseKeyring(current, old string) (*Keyring, error) {
	if strings.TrimSpace(current) == "" {
		if strings.TrimSpace(old) != "" {
			return nil, errors.New("old secret keys (CAIRN_SECRET_KEYS_OLD) need a current key (CAIRN_SECRET_KEY)")
		}
		return NewKeyring(nil), nil
	}
	cur, err := ParseKey(current)
	if err != nil {
		return nil, fmt.Errorf("CAIRN_SECRET_KEY: %w", err)
	}
	var olds []*Key
	for i, s := range strings.Split(old, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		k, err := ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("CAIRN_SECRET_KEYS_OLD, key %d: %w", i+1, err)
		}
		olds = append(olds, k)
	}
	return NewKeyring(cur, olds...), nil
}

// Configured reports whether the keyring has a current key.
func (k *Keyring) Configured() bool { return k != nil && k.current != nil }

// Seal encrypts value for the secret name with the current key and returns the key's
// id and nonce || ciphertext. ErrNoKey without a key.
func (k *Keyring) Seal(name string, value []byte) (keyID string, sealed []byte, err error) {
	if !k.Configured() {
		return "", nil, ErrNoKey
	}
	aead := k.current.aead
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(value)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", nil, fmt.Errorf("seal secret %s: %w", name, err)
	}
	return k.current.id, aead.Seal(nonce, nonce, value, additionalData(name)), nil
}

// Open decrypts what Seal returned for the secret name. ErrNoKey without a key,
// ErrUnknownKey when keyID is not one of the keyring's, ErrDecrypt when it does not
// open.
func (k *Keyring) Open(name, keyID string, sealed []byte) ([]byte, error) {
	if !k.Configured() {
		return nil, ErrNoKey
	}
	key, ok := k.byID[keyID]
	if !ok {
		return nil, fmt.Errorf("open secret %s: %w (key id %s; the current key is %s: configure the old key in CAIRN_SECRET_KEYS_OLD)", name, ErrUnknownKey, keyID, k.current.id)
	}
	n := key.aead.NonceSize()
	if len(sealed) < n+key.aead.Overhead() {
		return nil, fmt.Errorf("open secret %s: %w", name, ErrDecrypt)
	}
	value, err := key.aead.Open(nil, sealed[:n], sealed[n:], additionalData(name))
	if err != nil {
		return nil, fmt.Errorf("open secret %s: %w", name, ErrDecrypt)
	}
	return value, nil
}

func additionalData(name string) []byte { return []byte("cairn secret\x00" + name) }

// Vault stores and reveals secrets: the catalog holds them sealed, the keyring seals
// and opens them. It is safe for concurrent use.
type Vault struct {
	store *catalog.Store
	keys  *Keyring
}

// NewVault returns a vault over store with keys (nil: no key; every call then fails
// with ErrNoKey).
func NewVault(store *catalog.Store, keys *Keyring) *Vault {
	if keys == nil {
		keys = NewKeyring(nil)
	}
	return &Vault{store: store, keys: keys}
}

// Configured reports whether the vault has a key.
func (v *Vault) Configured() bool { return v.keys.Configured() }

// Put seals value and stores it as the next version of the secret name, set by actor;
// it returns the version (number, time, key id; not the sealed value). ErrNoKey
// without a key; catalog.ErrInvalidInput for a bad name.
func (v *Vault) Put(ctx context.Context, name string, value []byte, actor string) (*catalog.SecretVersion, error) {
	keyID, sealed, err := v.keys.Seal(name, value)
	if err != nil {
		return nil, err
	}
	return v.store.SecretPut(ctx, &catalog.SecretPutParams{Name: name, KeyID: keyID, Sealed: sealed, Actor: actor})
}

// Reveal returns the newest version of the secret name, decrypted, and its number.
// ErrNoKey without a key, catalog.ErrNotFound if there is no such secret,
// ErrUnknownKey or ErrDecrypt when it cannot be opened.
func (v *Vault) Reveal(ctx context.Context, name string) (value []byte, version int, err error) {
	if !v.keys.Configured() {
		return nil, 0, ErrNoKey
	}
	sv, err := v.store.SecretLatest(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	value, err = v.keys.Open(name, sv.KeyID, sv.Sealed)
	if err != nil {
		return nil, 0, err
	}
	return value, sv.Version, nil
}
