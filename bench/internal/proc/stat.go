package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// MemoryKiB returns a field of /proc/<pid>/status in KiB: "VmRSS" (resident now) or
// "VmHWM" (the peak resident size).
func MemoryKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// CPU is the processor time of a process in seconds: its own (user+system) and that
// of its children it has reaped.
type CPU struct {
	Self     float64
	Children float64
}

// ProcessCPU reads /proc/<pid>/stat.
func ProcessCPU(pid int) (CPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return CPU{}, err
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return CPU{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
	if len(f) < 15 {
		return CPU{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(k int) float64 {
		v, _ := strconv.ParseFloat(f[k-3], 64)
		return v / clockTicks
	}
	return CPU{Self: num(14) + num(15), Children: num(16) + num(17)}, nil
}

// TreeCPU returns the processor seconds used so far by pid, the children it reaped,
// and its live direct children: for a postmaster, the whole PostgreSQL cluster.
func TreeCPU(pid int) float64 {
	c, err := ProcessCPU(pid)
	if err != nil {
		return 0
	}
	total := c.Self + c.Children
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || parentOf(child) != pid {
			continue
		}
		if cc, err := ProcessCPU(child); err == nil {
			total += cc.Self
		}
	}
	return total
}

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// Machine describes the host.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	MemoryMiB int64  `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	PGVersion string `json:"pg_version"`
	// LoadAverage is /proc/loadavg's 1, 5 and 15 minute figures when the scenario
	// started and when it ended: the machine is shared.
	LoadAverageStart [3]float64 `json:"load_average_start"`
	LoadAverageEnd   [3]float64 `json:"load_average_end"`
}

// Host returns what /proc says about the machine; PGVersion is left to the caller.
func Host() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kib, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemoryMiB = kib / 1024
			}
		}
	}
	m.LoadAverageStart = LoadAverage()
	return m
}

// LoadAverage returns the 1, 5 and 15 minute load averages.
func LoadAverage() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

// LookPath finds name in PATH, $GOBIN, or $(go env GOPATH)/bin, the places
// `go install` (and `make tools`) put programs.
func LookPath(name string, gopathBins []string) string {
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), gopathBins...) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
