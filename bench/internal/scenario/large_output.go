package scenario

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// largeRounds is how many of Cairn's runs alternate with the plain PUTs: PUT,
// Cairn, PUT, … Cairn, PUT.
const largeRounds = 3

// LargeOutput runs one exec step that prints LargeMiB to stdout, which the
// dispatcher streams into the blob store (versitygw), largeRounds times,
// alternated with a plain PUT of the same size to the same server before and
// after each. MiB/s = size / (attempt finished_at − started_at); each round's
// ratio is its MiB/s over the mean of the PUTs on either side; peak RSS = VmHWM
// of the `cairn serve` process, started fresh for this scenario (the handler is
// a separate process and not counted). Bytes written (/proc/PID/io write_bytes)
// per byte of output show where copies go: Cairn's own (a spool file) and the
// S3 server's, beside the server's for a plain PUT.
func LargeOutput(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("large_output")
	size := int64(e.Scale.LargeMiB) << 20
	r.Settings["output_bytes"] = size
	r.Settings["rounds"] = largeRounds
	r.Settings["workflow"] = "one exec step: a shell script running `head -c N /dev/zero`"
	r.Settings["blob_store"] = "versitygw posix backend on the same disk, over loopback"
	r.Settings["server"] = "a fresh `cairn serve` with its dispatcher (default settings: inline limit 256 KiB, part size 8 MiB: one part held, the next read while S3 answers for the one before), one run per round"
	r.Settings["memory"] = "serve_peak_rss_mib: VmHWM of the serve process over the scenario; serve_peak_anon_mib and serve_peak_file_mib: the largest RssAnon (its own memory: Go heap, runtime, the blob store's part) and RssFile (pages of the cairn binary and its libraries mapped in, shared with other processes and reclaimable) sampled every 20 ms over the rounds"
	r.Settings["cpu"] = "CPU seconds per round (Cairn's run, start to end, the PUTs not counted): cairn_cpu_s the serve process, handler_cpu_s its exec children (sh, head), versitygw_cpu_s the gateway, postgres_cpu_s PostgreSQL"
	r.Settings["s3_ceiling"] = "the S3 server's own PUT rate in the same run: a plain minio-go PutObject of the same size (zeros, parts of 16 MiB, one at a time, no payload SHA-256: the part size Cairn used before, twice its default now, which only favours the PUT) to the same bucket, before the first round, between rounds and after the last; s3_put_mib_per_s is their mean; a round's ratio is its MiB/s over the mean of the PUTs either side of it; ratio_to_s3_put is the median round's, ratio_to_s3_put_min the worst's; mib_per_s the median round's"
	r.Settings["writes"] = "bytes written per byte of output (/proc/PID/io write_bytes, summed over rounds): cairn_written_per_byte by the serve process (a spool file), s3_written_per_byte by versitygw during Cairn's rounds, s3_put_written_per_byte by versitygw during the plain PUTs"
	err := largeOutput(ctx, e, r, size)
	r.AtLeast("mib_per_s", 100)
	r.AtLeast("ratio_to_s3_put", 0.8)
	r.AtLeast("ratio_to_s3_put_min", 0.8)
	r.AtMost("serve_peak_rss_mib", 64)
	r.Finish(err)
	return r
}

func largeOutput(ctx context.Context, e *Env, r *report.Result, size int64) error {
	if err := e.DeployFresh(ctx, cairn.LargeBundle(size)); err != nil {
		return err
	}
	servers, err := e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return err
	}
	defer StopAll(servers)
	srv := servers[0]
	r.Set("serve_rss_at_start_mib", srv.MemoryMiB("VmRSS"))
	s3pid := e.S3.Pid()

	var puts, rates, ratios, attempts []float64
	var putWritten, cairnWritten, s3Written int64
	put := func() error {
		w0 := writeBytes(s3pid)
		rate, err := e.s3PutMiBPerS(ctx, size)
		if err != nil {
			return err
		}
		putWritten += writeBytes(s3pid) - w0
		puts = append(puts, rate)
		return nil
	}
	if err := put(); err != nil {
		return err
	}
	var cairnCPU, handlerCPU, s3CPU, pgCPU float64
	peaks := sampleMemory(srv)
	defer peaks.stop()
	for i := range largeRounds {
		e.Logf("large output: round %d of %d, %d MiB", i+1, largeRounds, size>>20)
		c0, s0 := writeBytes(srv.Pid()), writeBytes(s3pid)
		cpu0, gw0, pg0 := srv.CPU(), e.S3.CPUSeconds(), e.PG.CPUSeconds()
		secs, err := largeRun(ctx, e, srv, size)
		if err != nil {
			return err
		}
		cpu1 := srv.CPU()
		cairnCPU += cpu1.Self - cpu0.Self
		handlerCPU += cpu1.Children - cpu0.Children
		s3CPU += e.S3.CPUSeconds() - gw0
		pgCPU += e.PG.CPUSeconds() - pg0
		cairnWritten += writeBytes(srv.Pid()) - c0
		s3Written += writeBytes(s3pid) - s0
		attempts = append(attempts, secs)
		rates = append(rates, float64(size>>20)/secs)
		if err := put(); err != nil {
			return err
		}
		ratios = append(ratios, rates[i]/((puts[i]+puts[i+1])/2))
		e.Logf("large output: round %d: %.0f MiB/s, %.2f of the plain PUT", i+1, rates[i], ratios[i])
	}
	r.Set("serve_peak_rss_mib", srv.MemoryMiB("VmHWM"))
	anon, file := peaks.stop()
	r.Set("serve_peak_anon_mib", anon)
	r.Set("serve_peak_file_mib", file)
	r.Set("cairn_cpu_s", cairnCPU/largeRounds)
	r.Set("handler_cpu_s", handlerCPU/largeRounds)
	r.Set("versitygw_cpu_s", s3CPU/largeRounds)
	r.Set("postgres_cpu_s", pgCPU/largeRounds)
	r.Set("attempt_s", report.Percentile(attempts, 50))
	r.Set("mib_per_s", report.Percentile(rates, 50))
	r.Set("ratio_to_s3_put", report.Percentile(ratios, 50))
	r.Set("ratio_to_s3_put_min", slices.Min(ratios))
	r.Set("s3_put_mib_per_s", mean(puts))
	for i, v := range ratios {
		r.Set(fmt.Sprintf("ratio_round_%d", i+1), v)
	}
	total := float64(size * largeRounds)
	r.Set("cairn_written_per_byte", float64(cairnWritten)/total)
	r.Set("s3_written_per_byte", float64(s3Written)/total)
	r.Set("s3_put_written_per_byte", float64(putWritten)/float64(size*int64(len(puts))))
	return nil
}

// memoryPeaks samples a server's RssAnon (its own memory: the Go heap, the
// blob store's part) and RssFile (the pages of the cairn binary and libraries it
// has mapped, shared with every process that maps them) every 20 ms, and keeps
// the largest of each: VmHWM is only their sum's peak.
type memoryPeaks struct {
	done       chan struct{}
	finished   chan struct{}
	anon, file float64
	once       bool
}

func sampleMemory(srv *cairn.Server) *memoryPeaks {
	m := &memoryPeaks{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(m.finished)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			m.anon = max(m.anon, srv.MemoryMiB("RssAnon"))
			m.file = max(m.file, srv.MemoryMiB("RssFile"))
			select {
			case <-m.done:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// stop ends the sampling (once; later calls return the same) and returns the
// peaks in MiB.
func (m *memoryPeaks) stop() (anon, file float64) {
	if !m.once {
		m.once = true
		close(m.done)
		<-m.finished
	}
	return m.anon, m.file
}

// largeRun starts one run of the large workflow on srv, waits for it, checks
// the stored output's size and returns the attempt's duration in seconds.
func largeRun(ctx context.Context, e *Env, srv *cairn.Server, size int64) (float64, error) {
	run, err := cairn.NewClient(srv.URL).StartRun(ctx, cairn.WorkflowLarge)
	if err != nil {
		return 0, err
	}
	if err := waitRun(ctx, e, run.ID, 20*time.Minute); err != nil {
		return 0, err
	}
	var secs float64
	var stored int64
	err = e.DB.QueryRow(ctx, `
SELECT extract(epoch FROM a.finished_at - a.started_at)::float8, coalesce((s.output->'$blob'->>'size')::bigint, -1)
FROM attempts a JOIN steps s ON s.run_id = a.run_id AND s.key = a.step_key
WHERE a.run_id = $1 AND a.status = 'succeeded'`, run.ID).Scan(&secs, &stored)
	if err != nil {
		return 0, err
	}
	if stored != size {
		return 0, fmt.Errorf("stored output is %d bytes, want %d", stored, size)
	}
	return secs, nil
}

// writeBytes is what process pid has written to storage so far
// (/proc/PID/io write_bytes), 0 if unknown.
func writeBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// s3PutMiBPerS uploads size bytes of zeros to the benchmark's bucket with a plain
// minio-go PutObject (parts of 16 MiB, one at a time, no streaming SHA-256
// signature: twice Cairn's part, as Cairn uploaded before) and returns MiB/s;
// the object is removed after.
func (e *Env) s3PutMiBPerS(ctx context.Context, size int64) (float64, error) {
	mc, err := e.S3.Client()
	if err != nil {
		return 0, err
	}
	key := fmt.Sprintf("bench/s3-ceiling-%d", time.Now().UnixNano())
	start := time.Now()
	_, err = mc.PutObject(ctx, e.Bucket, key, io.LimitReader(zeros{}, size), size, minio.PutObjectOptions{
		PartSize: 16 << 20, DisableContentSha256: true, ContentType: "application/octet-stream",
	})
	secs := time.Since(start).Seconds()
	if err != nil {
		return 0, fmt.Errorf("plain S3 upload of %d bytes: %w", size, err)
	}
	if err := mc.RemoveObject(ctx, e.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return 0, fmt.Errorf("remove %s: %w", key, err)
	}
	e.Logf("large output: plain S3 PUT of %d MiB: %.0f MiB/s", size>>20, float64(size>>20)/secs)
	return float64(size>>20) / secs, nil
}

// zeros reads as an endless run of zero bytes (the content `head -c N /dev/zero`
// prints).
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
