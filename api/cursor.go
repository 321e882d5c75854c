package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Cursors are opaque to clients: base64url of a versioned JSON document naming the
// list they page, a fingerprint of the list's filters and the last key seen, with a
// MAC keyed by the server (HMAC-SHA256), so that a cursor the server did not issue,
// edited or minted by a client, is refused rather than read (an unkeyed
// checksum once let forged keys reach SQL).

const (
	// cursorVersion 2: keyed MAC. Version 1 cursors (an unkeyed checksum) are
	// refused: a client starts its listing again.
	cursorVersion = 2
	// maxCursorLength bounds what a client can make the server decode.
	maxCursorLength = 512
	// cursorKeyLabel derives the cursor key from Config.SigningKey: one secret
	// serves lease credentials and cursors, and neither MAC is valid as the other.
	cursorKeyLabel = "cairn/api/cursor/v2"
	// cursorMACSize is the MAC's length in bytes (of SHA-256's 32).
	cursorMACSize = 16
)

type cursorDoc struct {
	V      int             `json:"v"`
	List   string          `json:"l"`
	Filter string          `json:"f,omitempty"`
	After  json.RawMessage `json:"a"`
	MAC    string          `json:"s"`
}

// cursorCodec makes and reads the cursors of one key.
type cursorCodec struct{ key []byte }

// cursors returns the codec of the server's cursor key: derived from
// Config.SigningKey, so every server sharing the signing key reads the others'
// cursors; without a signing key, a key random to this process.
func (s *Server) cursors() cursorCodec {
	if len(s.cfg.SigningKey) == 0 {
		return cursorCodec{key: processCursorKey()}
	}
	m := hmac.New(sha256.New, s.cfg.SigningKey)
	m.Write([]byte(cursorKeyLabel))
	return cursorCodec{key: m.Sum(nil)}
}

// processCursorKey is the cursor key of servers without a signing key (tests,
// embedders that take no checkpoints): random, made once per process so that it
// needs no field of Server, and read-only once made.
var processCursorKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
})

// encodeCursor makes the cursor for list, bound to filter, resuming after the key.
func (s *Server) encodeCursor(list, filter string, after any) string {
	return s.cursors().encode(list, filter, after)
}

// errInvalidCursor means a cursor is malformed, was not made with this server's key
// (forged, edited, of another deployment), belongs to another list or was made with
// other filters.
var errInvalidCursor = errors.New("invalid cursor")

// decodeCursor reads a cursor for list and filter into after. An empty cursor leaves
// after untouched; an invalid one is errInvalidCursor.
func (s *Server) decodeCursor(raw, list, filter string, after any) error {
	return s.cursors().decode(raw, list, filter, after)
}

// mac is the MAC of a cursor's fields, each length-prefixed so that no two field
// lists make the same input.
func (c cursorCodec) mac(list, filter string, after []byte) string {
	m := hmac.New(sha256.New, c.key)
	var n [8]byte
	for _, f := range [][]byte{{cursorVersion}, []byte(list), []byte(filter), after} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write(f)
	}
	return hex.EncodeToString(m.Sum(nil)[:cursorMACSize])
}

func (c cursorCodec) encode(list, filter string, after any) string {
	a, err := json.Marshal(after)
	if err != nil {
		panic(fmt.Sprintf("cursor key of %s does not marshal: %v", list, err)) // a programming error
	}
	doc := cursorDoc{V: cursorVersion, List: list, Filter: filter, After: a, MAC: c.mac(list, filter, a)}
	b, _ := json.Marshal(doc)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c cursorCodec) decode(raw, list, filter string, after any) error {
	if raw == "" {
		return nil
	}
	bad := func(why string) error {
		return withDetail(errInvalidCursor, "invalid cursor: %s", why)
	}
	if len(raw) > maxCursorLength {
		return bad("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return bad("not a cursor this server issued")
	}
	var doc cursorDoc
	if err := json.Unmarshal(b, &doc); err != nil || doc.V != cursorVersion || len(doc.After) == 0 {
		return bad("not a cursor this server issued")
	}
	if !hmac.Equal([]byte(doc.MAC), []byte(c.mac(doc.List, doc.Filter, doc.After))) {
		return bad("not a cursor this server issued, or it was altered")
	}
	if doc.List != list {
		return bad("the cursor belongs to another list")
	}
	if doc.Filter != filter {
		return bad("the cursor was issued for other filters; start again without a cursor")
	}
	if err := json.Unmarshal(doc.After, after); err != nil {
		return bad("not a cursor this server issued")
	}
	return nil
}
