package catalog

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// sqlLogChunkAppend stores a chunk of a running attempt's log, fenced by the
// attempt (found by its lease token) still running, and drops the chunks that end
// before the kept tail (keep bytes before the chunk's end).
const sqlLogChunkAppend = `
WITH a AS (
    SELECT run_id, step_key, number FROM attempts WHERE lease_token = $1 AND status = 'running'
), ins AS (
    INSERT INTO attempt_log_chunks (run_id, step_key, number, byte_start, data)
    SELECT run_id, step_key, number, $2, $3 FROM a
    ON CONFLICT DO NOTHING
    RETURNING run_id
)
DELETE FROM attempt_log_chunks c USING a
 WHERE c.run_id = a.run_id AND c.step_key = a.step_key AND c.number = a.number
   AND c.byte_start + length(c.data) <= $2 + length($3) - $4
   AND EXISTS (SELECT 1 FROM ins)`

// sqlLogChunkRead reads the chunks of an attempt that end after an offset.
const sqlLogChunkRead = `
SELECT byte_start, data FROM attempt_log_chunks
 WHERE run_id = $1 AND step_key = $2 AND number = $3 AND byte_start + length(data) > $4
 ORDER BY byte_start`

// sqlLogChunkDelete deletes the chunks of an attempt, found by its lease token.
const sqlLogChunkDelete = `
DELETE FROM attempt_log_chunks c USING attempts a
 WHERE a.lease_token = $1 AND c.run_id = a.run_id AND c.step_key = a.step_key AND c.number = a.number`

// LogChunkAppendParams is a chunk of a running attempt's log.
type LogChunkAppendParams struct {
	// LeaseToken names the attempt; the chunk is dropped unless it still runs.
	LeaseToken int64
	// Offset is the chunk's first byte's offset in the attempt's log.
	Offset int64
	// Data is the chunk's bytes.
	Data []byte
	// Keep is how many bytes of the log's end are kept: chunks that end before
	// Offset+len(Data)-Keep are deleted.
	Keep int64
}

// LogChunkAppend stores a chunk of the log of a running attempt (the live tail).
// A chunk of an attempt that no longer runs is dropped without an error.
func (s *Store) LogChunkAppend(ctx context.Context, p *LogChunkAppendParams) error {
	if _, err := s.db.ExecContext(ctx, sqlLogChunkAppend, p.LeaseToken, p.Offset, p.Data, p.Keep); err != nil {
		return fmt.Errorf("append log chunk of lease %d: %w", p.LeaseToken, translateError(err))
	}
	return nil
}

// LogChunks is what is kept of the live log of an attempt from an offset.
type LogChunks struct {
	// Offset is the offset of Data's first byte: the offset asked for, or later
	// when the bytes there were not kept (the tail only is) or never published.
	Offset int64
	// Data holds the bytes from Offset, contiguous.
	Data []byte
}

// LogChunkRead returns the published bytes of an attempt's log from offset on:
// contiguous from the first chunk kept at or after offset, up to a gap (a chunk
// that could not be stored). Empty when nothing past offset is kept.
func (s *Store) LogChunkRead(ctx context.Context, runID uuid.UUID, key string, number int, offset int64) (*LogChunks, error) {
	rows, err := s.db.QueryContext(ctx, sqlLogChunkRead, runID, key, number, offset)
	if err != nil {
		return nil, fmt.Errorf("read log chunks of %s/%s attempt %d: %w", runID, key, number, translateError(err))
	}
	defer rows.Close()
	out := &LogChunks{Offset: offset}
	first := true
	for rows.Next() {
		var start int64
		var data []byte
		if err := rows.Scan(&start, &data); err != nil {
			return nil, fmt.Errorf("read log chunks of %s/%s attempt %d: %w", runID, key, number, translateError(err))
		}
		if first {
			if start > offset {
				out.Offset = start
			}
			first = false
		}
		end := out.Offset + int64(len(out.Data))
		if start > end {
			break // a gap: the caller reads on from the next chunk later
		}
		if end-start >= int64(len(data)) {
			continue
		}
		out.Data = append(out.Data, data[end-start:]...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read log chunks of %s/%s attempt %d: %w", runID, key, number, translateError(err))
	}
	return out, nil
}

// LogChunkDelete deletes the live log of an attempt (by its lease token), once its
// whole log is stored.
func (s *Store) LogChunkDelete(ctx context.Context, leaseToken int64) error {
	if _, err := s.db.ExecContext(ctx, sqlLogChunkDelete, leaseToken); err != nil {
		return fmt.Errorf("delete log chunks of lease %d: %w", leaseToken, translateError(err))
	}
	return nil
}
