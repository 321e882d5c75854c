package api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
)

// Cursors are opaque to clients: base64url of a versioned JSON document naming the
// list they page, a fingerprint of the list's filters and the last key seen, with a
// checksum so an edited cursor is refused rather than silently misread.

const (
	cursorVersion = 1
	// maxCursorLength bounds what a client can make the server decode.
	maxCursorLength = 512
)

type cursorDoc struct {
	V      int             `json:"v"`
	List   string          `json:"l"`
	Filter string          `json:"f,omitempty"`
	After  json.RawMessage `json:"a"`
	Sum    string          `json:"s"`
}

func cursorSum(list, filter string, after []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00", cursorVersion, list, filter)
	h.Write(after)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// encodeCursor makes the cursor for list, bound to filter, resuming after the key.
func encodeCursor(list, filter string, after any) string {
	a, err := json.Marshal(after)
	if err != nil {
		panic(fmt.Sprintf("cursor key of %s does not marshal: %v", list, err)) // a programming error
	}
	doc := cursorDoc{V: cursorVersion, List: list, Filter: filter, After: a, Sum: cursorSum(list, filter, a)}
	b, _ := json.Marshal(doc)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor for list and filter into after. An empty cursor leaves
// after untouched. A cursor that is malformed, edited, from another list or made
// with other filters is a 400 problem.
func decodeCursor(raw, list, filter string, after any) error {
	if raw == "" {
		return nil
	}
	bad := func(why string) error {
		return NewProblem(http.StatusBadRequest, "invalid cursor: "+why)
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
	if doc.Sum != cursorSum(doc.List, doc.Filter, doc.After) {
		return bad("the cursor was altered")
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
