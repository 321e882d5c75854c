package cairn

import (
	"fmt"
	"strings"
)

// Workflows the benchmark deploys.
const (
	// WorkflowChain is ChainSteps noop steps in a line.
	WorkflowChain = "bench-chain"
	// WorkflowChainLimited is WorkflowChain with a concurrency limit on every
	// step (key: the run's id, limit 1): every claim goes through the limit.
	WorkflowChainLimited = "bench-chain-limited"
	// WorkflowFanout is root → FanoutWidth parallel noops → join.
	WorkflowFanout = "bench-fanout"
	// WorkflowSleep is one `sleep` step of SleepDuration, retried on interruption.
	WorkflowSleep = "bench-sleep"
	// WorkflowLarge is one exec step printing LargeBytes to stdout.
	WorkflowLarge = "bench-large"
	// WorkflowOne is one noop step.
	WorkflowOne = "bench-one"

	// ChainSteps is the length of WorkflowChain.
	ChainSteps = 10
	// SleepDuration is how long WorkflowSleep's step sleeps.
	SleepDuration = "2s"
)

// ChainKey returns the key of the i-th step (0-based) of WorkflowChain: s01, s02, ….
func ChainKey(i int) string { return fmt.Sprintf("s%02d", i+1) }

// ChainBundle is WorkflowChain.
func ChainBundle() map[string]File { return chainBundle(WorkflowChain, "") }

// ChainLimitedBundle is WorkflowChainLimited.
func ChainLimitedBundle() map[string]File {
	return chainBundle(WorkflowChainLimited, "defaults:\n  concurrency: {name: bench, key: \"run.id\", limit: 1}\n")
}

func chainBundle(name, defaults string) map[string]File {
	var b strings.Builder
	b.WriteString("name: " + name + "\ndescription: ten noop steps in a line\n" + defaults + "steps:\n")
	for i := 0; i < ChainSteps; i++ {
		if i == 0 {
			fmt.Fprintf(&b, "  - {key: %s, builtin: noop}\n", ChainKey(i))
			continue
		}
		fmt.Fprintf(&b, "  - {key: %s, needs: [%s], builtin: noop}\n", ChainKey(i), ChainKey(i-1))
	}
	return map[string]File{"cairn.yaml": {Body: []byte(b.String())}}
}

// FanoutBundle is WorkflowFanout with width parallel steps p0001….
func FanoutBundle(width int) map[string]File {
	var b strings.Builder
	b.WriteString("name: " + WorkflowFanout + "\ndescription: fan-out and join of noop steps\nsteps:\n  - {key: root, builtin: noop}\n")
	keys := make([]string, width)
	for i := range keys {
		keys[i] = fmt.Sprintf("p%04d", i+1)
		fmt.Fprintf(&b, "  - {key: %s, needs: [root], builtin: noop}\n", keys[i])
	}
	fmt.Fprintf(&b, "  - {key: join, needs: [%s], builtin: noop}\n", strings.Join(keys, ", "))
	return map[string]File{"cairn.yaml": {Body: []byte(b.String())}}
}

// SleepBundle is WorkflowSleep. Three attempts: an attempt interrupted by a dead
// dispatcher counts against the budget.
func SleepBundle() map[string]File {
	y := "name: " + WorkflowSleep + "\ndescription: one sleep step\nsteps:\n" +
		"  - key: nap\n    builtin: sleep\n    with: {duration: " + SleepDuration + "}\n" +
		"    retry: {max_attempts: 3, backoff: fixed, delay: 1s}\n"
	return map[string]File{"cairn.yaml": {Body: []byte(y)}}
}

// LargeBundle is WorkflowLarge printing n bytes.
func LargeBundle(n int64) map[string]File {
	y := "name: " + WorkflowLarge + "\ndescription: one exec step with a large output\n" +
		"steps:\n  - key: produce\n    exec: [\"./bin/produce\"]\n    timeout: 30m\n"
	script := fmt.Sprintf("#!/bin/sh\n# Prints %d zero bytes to stdout.\ncat >/dev/null\nexec head -c %d /dev/zero\n", n, n)
	return map[string]File{
		"cairn.yaml":  {Body: []byte(y)},
		"bin/produce": {Body: []byte(script), Mode: 0o755},
	}
}

// OneBundle is WorkflowOne.
func OneBundle() map[string]File {
	y := "name: " + WorkflowOne + "\ndescription: one noop step\nsteps:\n  - {key: only, builtin: noop}\n"
	return map[string]File{"cairn.yaml": {Body: []byte(y)}}
}

// WorkflowWake is one durable `sleep` step of WakeSleep.
const WorkflowWake = "bench-wake"

// WakeSleep is how long WorkflowWake's step sleeps.
const WakeSleep = "5s"

// WakeBundle is WorkflowWake: a durable sleep (no function runs; the step is
// suspended, holding no slot, and woken by the catalog's wake sweeper).
func WakeBundle() map[string]File {
	y := "name: " + WorkflowWake + "\ndescription: one durable sleep\nsteps:\n  - {key: nap, sleep: " + WakeSleep + "}\n"
	return map[string]File{"cairn.yaml": {Body: []byte(y)}}
}

// WorkflowMap is an exec step printing MapItems JSON Lines, a map of noop
// built-ins over them (max_parallel MapParallel; three attempts: an instance
// interrupted by a dead dispatcher counts against the budget) and a join.
const WorkflowMap = "bench-map"

// MapParallel is WorkflowMap's max_parallel.
const MapParallel = 200

// MapBundle is WorkflowMap over n items: the split step prints 0 … n−1, one a line
// (a large output: a blob, read by the map as a stream).
func MapBundle(n int) map[string]File {
	y := "name: " + WorkflowMap + "\ndescription: a map over JSON Lines\nsteps:\n" +
		"  - {key: split, exec: [\"./bin/split\"]}\n" +
		fmt.Sprintf("  - {key: each, needs: [split], map: {over: \"deps.split\", max_parallel: %d}, builtin: noop,\n", MapParallel) +
		"     retry: {max_attempts: 3, backoff: fixed, delay: 1s}}\n" +
		"  - {key: join, needs: [each], builtin: noop}\n"
	script := fmt.Sprintf("#!/bin/sh\n# Prints the items 0 to %d, one a line.\ncat >/dev/null\nexec seq 0 %d\n", n-1, n-1)
	return map[string]File{
		"cairn.yaml": {Body: []byte(y)},
		"bin/split":  {Body: []byte(script), Mode: 0o755},
	}
}
