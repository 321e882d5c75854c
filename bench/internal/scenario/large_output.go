package scenario

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// LargeOutput runs one exec step that prints LargeMiB to stdout, which the
// dispatcher streams into the blob store (versitygw). MiB/s = size / (attempt
// finished_at − started_at); peak RSS = VmHWM of the `cairn serve` process, started
// fresh for this run (the handler is a separate process and not counted).
func LargeOutput(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("large_output")
	size := int64(e.Scale.LargeMiB) << 20
	r.Settings["output_bytes"] = size
	r.Settings["workflow"] = "one exec step: a shell script running `head -c N /dev/zero`"
	r.Settings["blob_store"] = "versitygw posix backend on the same disk, over loopback"
	r.Settings["server"] = "a fresh `cairn serve` with its dispatcher (default settings: inline limit 256 KiB, part size 16 MiB)"
	r.Settings["cpu"] = "CPU seconds during the run: cairn_cpu_s the serve process, handler_cpu_s its exec children (sh, head), versitygw_cpu_s the gateway"
	r.Settings["s3_ceiling"] = "the S3 server's own PUT rate in the same run: a plain minio-go PutObject of the same size (zeros, part size 16 MiB, no payload SHA-256, as Cairn uploads) to the same bucket, once before and once after Cairn's run; s3_put_mib_per_s is their mean, ratio_to_s3_put = mib_per_s ÷ s3_put_mib_per_s"
	err := largeOutput(ctx, e, r, size)
	r.AtLeast("mib_per_s", 100)
	r.AtLeast("ratio_to_s3_put", 0.8)
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
	before, err := e.s3PutMiBPerS(ctx, size)
	if err != nil {
		return err
	}
	r.Set("serve_rss_at_start_mib", srv.MemoryMiB("VmRSS"))
	cpu0, s3CPU0, pgCPU0 := srv.CPU(), e.S3.CPUSeconds(), e.PG.CPUSeconds()
	e.Logf("large output: %d MiB", size>>20)
	run, err := cairn.NewClient(srv.URL).StartRun(ctx, cairn.WorkflowLarge)
	if err != nil {
		return err
	}
	if err := waitRun(ctx, e, run.ID, 20*time.Minute); err != nil {
		return err
	}
	r.Set("serve_peak_rss_mib", srv.MemoryMiB("VmHWM"))
	cpu1 := srv.CPU()
	r.Set("cairn_cpu_s", cpu1.Self-cpu0.Self)
	r.Set("handler_cpu_s", cpu1.Children-cpu0.Children)
	r.Set("versitygw_cpu_s", e.S3.CPUSeconds()-s3CPU0)
	r.Set("postgres_cpu_s", e.PG.CPUSeconds()-pgCPU0)
	var secs float64
	var stored int64
	err = e.DB.QueryRow(ctx, `
SELECT extract(epoch FROM a.finished_at - a.started_at)::float8, coalesce((s.output->'$blob'->>'size')::bigint, -1)
FROM attempts a JOIN steps s ON s.run_id = a.run_id AND s.key = a.step_key
WHERE a.run_id = $1 AND a.status = 'succeeded'`, run.ID).Scan(&secs, &stored)
	if err != nil {
		return err
	}
	if stored != size {
		return fmt.Errorf("stored output is %d bytes, want %d", stored, size)
	}
	r.Set("attempt_s", secs)
	rate := float64(size>>20) / secs
	r.Set("mib_per_s", rate)
	after, err := e.s3PutMiBPerS(ctx, size)
	if err != nil {
		return err
	}
	ceiling := (before + after) / 2
	r.Set("s3_put_mib_per_s_before", before)
	r.Set("s3_put_mib_per_s_after", after)
	r.Set("s3_put_mib_per_s", ceiling)
	r.Set("ratio_to_s3_put", rate/ceiling)
	return nil
}

// s3PutMiBPerS uploads size bytes of zeros to the benchmark's bucket with a plain
// minio-go PutObject, as Cairn uploads an output (parts of 16 MiB, one at a time,
// no streaming SHA-256 signature), and returns MiB/s; the object is removed after.
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
