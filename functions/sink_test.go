package functions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
)

// testSink records what an invoker hands it. Its zero value keeps the output in
// memory; hashOutput keeps only its size and SHA-256 (for very large outputs).
// leaseLost makes Checkpoint, CheckpointFile and Progress fail with ErrLeaseLost;
// outputErr makes output writes fail.
type testSink struct {
	hashOutput bool
	leaseLost  bool
	outputErr  error

	mu              sync.Mutex
	out             bytes.Buffer
	outSize         int64
	outHash         hash.Hash
	maxWrite        int
	log             bytes.Buffer
	contentType     string
	checkpoints     []json.RawMessage
	checkpointFiles []string // the files' contents, read during the call
	progress        []json.RawMessage
}

var _ Sink = (*testSink)(nil)

func (s *testSink) Output() io.Writer { return sinkWriter{s: s, output: true} }

func (s *testSink) Log() io.Writer { return sinkWriter{s: s} }

func (s *testSink) SetOutputContentType(ct string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contentType = ct
}

func (s *testSink) Checkpoint(_ context.Context, value json.RawMessage) error {
	if s.leaseLost {
		return fmt.Errorf("store checkpoint: %w", ErrLeaseLost)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpoints = append(s.checkpoints, bytes.Clone(value))
	return nil
}

func (s *testSink) CheckpointFile(_ context.Context, f *os.File) error {
	if s.leaseLost {
		return fmt.Errorf("store checkpoint file: %w", ErrLeaseLost)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read checkpoint file: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpointFiles = append(s.checkpointFiles, string(b))
	return nil
}

func (s *testSink) Progress(_ context.Context, value json.RawMessage) error {
	if s.leaseLost {
		return fmt.Errorf("record progress: %w", ErrLeaseLost)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress = append(s.progress, bytes.Clone(value))
	return nil
}

// Accessors, safe while the invoker runs.

func (s *testSink) Out() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *testSink) OutSize() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outSize
}

func (s *testSink) OutSHA256() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outHash == nil {
		return hex.EncodeToString(sha256.New().Sum(nil))
	}
	return hex.EncodeToString(s.outHash.Sum(nil))
}

func (s *testSink) MaxWrite() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxWrite
}

func (s *testSink) LogText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

func (s *testSink) ContentType() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contentType
}

func (s *testSink) Checkpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.checkpoints))
	for i, c := range s.checkpoints {
		out[i] = string(c)
	}
	return out
}

func (s *testSink) CheckpointFiles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.checkpointFiles...)
}

func (s *testSink) ProgressReports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.progress))
	for i, p := range s.progress {
		out[i] = string(p)
	}
	return out
}

// sinkWriter is the Output or Log writer of a testSink.
type sinkWriter struct {
	s      *testSink
	output bool
}

func (w sinkWriter) Write(p []byte) (int, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.output {
		return s.log.Write(p)
	}
	if s.outputErr != nil {
		return 0, s.outputErr
	}
	s.outSize += int64(len(p))
	s.maxWrite = max(s.maxWrite, len(p))
	if s.hashOutput {
		if s.outHash == nil {
			s.outHash = sha256.New()
		}
		s.outHash.Write(p)
		return len(p), nil
	}
	return s.out.Write(p)
}
