package catalog

import (
	"database/sql/driver"
	"fmt"
)

// JSON is a json/jsonb column: the raw document, nil for SQL NULL.
// (json.RawMessage cannot scan NULL.)
type JSON []byte

// Scan implements sql.Scanner.
func (j *JSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), v...)
	case string:
		*j = JSON(v)
	default:
		return fmt.Errorf("scan %T into catalog.JSON", src)
	}
	return nil
}

// Value implements driver.Valuer. The document goes as text: lib/pq sends []byte
// in binary format when told to (Config.TransactionPooling), which jsonb reads
// differently (a version byte first).
func (j JSON) Value() (driver.Value, error) {
	if j == nil {
		return nil, nil
	}
	return string(j), nil
}

// MarshalJSON writes the document, or null.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps the document as it is (a copy); null is nil.
func (j *JSON) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*j = nil
		return nil
	}
	*j = append(JSON(nil), b...)
	return nil
}
