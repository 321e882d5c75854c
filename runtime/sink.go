package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// attemptSink is the dispatcher's functions.Sink for one attempt: output streamed to
// a payloadWriter, the log spooled to a temp file (then stored as a blob), checkpoints
// and progress written to the catalog fenced by the lease.
type attemptSink struct {
	ctx    context.Context
	d      *Dispatcher
	a      *attempt
	output *payloadWriter

	logMu     sync.Mutex
	logFile   *os.File
	logSize   int64
	logCapped bool
	logKey    string // the stored log's key, once storeLog stored it

	// The live tail: bytes written to the log (the bytes of the file, at the same
	// offsets) wait in livePending, from offset liveOffset, until publishLive
	// writes them to the catalog. Guarded by logMu.
	livePending []byte
	liveOffset  int64
	liveKick    chan struct{}
	liveStop    chan struct{}
	liveDone    chan struct{}
	liveOnce    sync.Once
	published   atomic.Bool // a chunk was written: cleanup deletes the live tail

	// progress bounds the step.progress events (progress.go).
	progress *progressLimiter
}

func newAttemptSink(ctx context.Context, d *Dispatcher, a *attempt) *attemptSink {
	s := &attemptSink{ctx: ctx, d: d, a: a, output: newPayloadWriter(ctx, d.blobs, d.cfg.Limits.InlineLimit, d.store),
		liveKick: make(chan struct{}, 1), liveStop: make(chan struct{}), liveDone: make(chan struct{})}
	s.progress = newProgressLimiter(ctx, s.recordProgress, func(err error) {
		a.logger().Warn("record a progress report", "error", err)
	})
	go s.publishLive()
	return s
}

// publishLive writes the log's new bytes to the catalog every LiveLogInterval, and
// sooner when liveLogBatch bytes wait, until stopLive: any API server reads them
// while the attempt runs (GET …/logs?offset=).
func (s *attemptSink) publishLive() {
	defer close(s.liveDone)
	t := time.NewTicker(s.d.cfg.Limits.LiveLogInterval)
	defer t.Stop()
	for {
		select {
		case <-s.liveStop:
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.liveKick:
		}
		s.flushLive()
	}
}

// flushLive publishes the bytes waiting. One that fails is dropped (the live tail
// has a gap; the stored log will not).
func (s *attemptSink) flushLive() {
	s.logMu.Lock()
	data, off := s.livePending, s.liveOffset
	s.livePending, s.liveOffset = nil, off+int64(len(data))
	s.logMu.Unlock()
	if len(data) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	s.published.Store(true)
	err := s.d.store.LogChunkAppend(ctx, &catalog.LogChunkAppendParams{
		LeaseToken: s.a.claim.LeaseToken, Offset: off, Data: data, Keep: s.d.cfg.Limits.LiveLogTail})
	if err != nil && ctx.Err() == nil {
		s.a.logger().Warn("publish the live log", "error", err)
	}
}

// stopLive stops publishing (the whole log is about to be stored). Safe twice.
func (s *attemptSink) stopLive() {
	s.liveOnce.Do(func() { close(s.liveStop) })
	<-s.liveDone
}

// live queues bytes just written to the log file for publishLive; only the last
// LiveLogTail bytes wait. Called with logMu held.
func (s *attemptSink) live(p []byte) {
	s.livePending = append(s.livePending, p...)
	if over := int64(len(s.livePending)) - s.d.cfg.Limits.LiveLogTail; over > 0 {
		s.livePending = append(s.livePending[:0], s.livePending[over:]...)
		s.liveOffset += over
	}
	if len(s.livePending) >= liveLogBatch {
		select {
		case s.liveKick <- struct{}{}:
		default:
		}
	}
}

func (s *attemptSink) Output() io.Writer { return s.output }

func (s *attemptSink) SetOutputContentType(ct string) { s.output.contentType = ct }

func (s *attemptSink) Log() io.Writer { return (*logWriter)(s) }

// logWriter spools the log to a temp file, up to MaxLogSize.
type logWriter attemptSink

func (w *logWriter) Write(p []byte) (int, error) {
	s := (*attemptSink)(w)
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.logFile == nil {
		f, err := os.CreateTemp(filepath.Join(s.d.cfg.Handlers.CacheDir, "tmp"), "log-")
		if err != nil {
			return 0, err
		}
		s.logFile = f
	}
	room := s.d.cfg.Limits.MaxLogSize - s.logSize
	if room <= 0 {
		if !s.logCapped {
			s.logCapped = true
			note := fmt.Appendf(nil, "\n[cairn: log truncated at %d bytes]\n", s.d.cfg.Limits.MaxLogSize)
			if _, err := s.logFile.Write(note); err == nil {
				s.live(note)
			}
		}
		return len(p), nil
	}
	q := p
	if int64(len(q)) > room {
		q = q[:room]
	}
	n, err := s.logFile.Write(q)
	s.logSize += int64(n)
	s.live(q[:n])
	if err != nil {
		return n, err
	}
	return len(p), nil
}

// storeLog stores the spooled log as a blob and returns its key ("" if none).
// Failing to store a log does not fail the attempt: it is logged.
func (s *attemptSink) storeLog() string {
	s.stopLive()
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.logFile == nil {
		return ""
	}
	if _, err := s.logFile.Seek(0, io.SeekStart); err != nil {
		return ""
	}
	// Not s.ctx: the log of an attempt that timed out or was handed back is kept,
	// until Stop gives up on writing what is left.
	ctx, cancel := context.WithTimeout(s.d.life.abandonCtx, time.Minute)
	defer cancel()
	obj, err := s.d.blobs.Put(ctx, blobstore.KindLogs, s.logFile, blobstore.PutOptions{ContentType: "text/plain; charset=utf-8", Size: -1, Claim: s.d.store.BlobClaim})
	if err != nil {
		s.a.logger().Warn("store attempt log", "error", err)
		return ""
	}
	s.logKey = obj.Key
	return obj.Key
}

// cleanup ends the attempt's log: the temp file goes, and so does the live tail
// once the whole log is stored (an attempt whose log was not stored keeps its
// tail: the only log it has).
func (s *attemptSink) cleanup() {
	s.stopLive()
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if s.logKey != "" && s.published.Load() {
		ctx, cancel := context.WithTimeout(s.d.life.abandonCtx, 10*time.Second)
		if err := s.d.store.LogChunkDelete(ctx, s.a.claim.LeaseToken); err != nil {
			s.a.logger().Warn("delete the live log", "error", err)
		}
		cancel()
	}
	if s.logFile != nil {
		s.logFile.Close()
		os.Remove(s.logFile.Name())
		s.logFile = nil
	}
}

// Checkpoint stores a checkpoint as every payload is stored
// (blobstore.PutPayload): inline, or as a blob when over the inline limit.
func (s *attemptSink) Checkpoint(ctx context.Context, value json.RawMessage) error {
	if !json.Valid(value) {
		return fmt.Errorf("checkpoint is not valid JSON")
	}
	stored, err := blobstore.PutPayload(ctx, s.d.blobs, bytes.NewReader(value), blobstore.PayloadOptions{
		InlineLimit: s.d.cfg.Limits.InlineLimit, ContentType: "application/json", Size: int64(len(value)), Claim: s.d.store.BlobClaim})
	if err != nil {
		return fmt.Errorf("store checkpoint: %w", err)
	}
	return s.saveCheckpoint(ctx, stored)
}

// CheckpointFile stores a file's bytes as the checkpoint (always a blob), at most
// MaxCheckpointSize of them: the bytes read count, not what the file says its size
// is (a sparse file of 5 GiB takes no disk space in the handler's TMPDIR, and a
// file may grow while it is read). A file over the limit stores nothing and is a
// *functions.Error (code checkpoint_too_large) that fails the attempt.
func (s *attemptSink) CheckpointFile(ctx context.Context, f *os.File) error {
	limit := s.d.cfg.Limits.MaxCheckpointSize
	if info, err := f.Stat(); err == nil && info.Size() > limit {
		// Known to be too large before a byte is read.
		return functions.CheckpointTooLarge(f.Name(), limit)
	}
	r := &limitedReader{r: f, left: limit}
	obj, err := s.d.blobs.Put(ctx, blobstore.KindPayloads, r, blobstore.PutOptions{ContentType: "application/octet-stream", Size: -1, Claim: s.d.store.BlobClaim, Index: s.d.store.BlobIndex(ctx)})
	if r.over {
		return functions.CheckpointTooLarge(f.Name(), limit)
	}
	if err != nil {
		return fmt.Errorf("store checkpoint file: %w", err)
	}
	return s.saveCheckpoint(ctx, blobstore.ObjectRef(obj).JSON())
}

// errOverLimit ends the reading of a limitedReader past its limit.
var errOverLimit = errors.New("over the size limit")

// limitedReader reads r until left bytes are read; a byte more is errOverLimit
// (unlike io.LimitReader, which ends quietly), so that the blob store's Put fails
// and keeps nothing.
type limitedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		l.over = true
		return 0, errOverLimit
	}
	l.left -= int64(n)
	return n, err
}

func (s *attemptSink) saveCheckpoint(ctx context.Context, stored json.RawMessage) error {
	err := s.d.store.StepCheckpoint(ctx, s.a.lease(), stored, catalog.CheckpointEventData(stored))
	if errors.Is(err, catalog.ErrLeaseLost) {
		s.d.metrics.leaseLost.WithLabelValues("checkpoint").Inc()
		return fmt.Errorf("%w: %w", functions.ErrLeaseLost, err)
	}
	return err
}

// Progress records a progress event, within the attempt's bounds: past them the
// newest report waits and is recorded later (progressLimiter).
func (s *attemptSink) Progress(ctx context.Context, value json.RawMessage) error {
	if !json.Valid(value) {
		return fmt.Errorf("progress is not valid JSON")
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"progress": value})
	return s.progress.report(ctx, b)
}

// endProgress records the newest progress report still waiting, before the
// attempt's outcome (progressLimiter.end).
func (s *attemptSink) endProgress() {
	if err := s.progress.end(); err != nil {
		s.a.logger().Warn("record the last progress report", "error", err)
	}
}

// recordProgress writes one step.progress event.
func (s *attemptSink) recordProgress(ctx context.Context, data json.RawMessage) error {
	err := s.d.store.StepEvent(ctx, s.a.lease(), catalog.EventStepProgress, data)
	if errors.Is(err, catalog.ErrLeaseLost) {
		s.d.metrics.leaseLost.WithLabelValues("progress").Inc()
		return fmt.Errorf("%w: %w", functions.ErrLeaseLost, err)
	}
	return err
}
