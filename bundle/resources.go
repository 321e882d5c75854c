package bundle

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ResourcesSpec bounds what an exec step's handler may use (manifest:
// resources). How it is enforced depends on the server: see
// functions.Resources.
type ResourcesSpec struct {
	// Memory is a size: bytes (268435456), or with a suffix: Ki, Mi, Gi, Ti
	// (powers of 1024) or K, M, G, T (powers of 1000). At least 1Mi, at most 1Ti.
	Memory string `yaml:"memory,omitempty" json:"memory,omitempty"`
	// CPU is a number of CPUs, fractions allowed (0.5): more than 0, at most 1024.
	CPU *float64 `yaml:"cpu,omitempty" json:"cpu,omitempty"`
	// Pids bounds the handler's processes and threads: 1 to 65536.
	Pids *int `yaml:"pids,omitempty" json:"pids,omitempty"`
}

// ResourcesDefinition is a normalized ResourcesSpec; zero fields are unset.
type ResourcesDefinition struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPU         float64 `json:"cpu,omitempty"`
	Pids        int     `json:"pids,omitempty"`
}

// Bounds of ResourcesSpec.
const (
	minMemory = 1 << 20
	maxMemory = 1 << 40
	maxCPU    = 1024
	maxPids   = 65536
)

// ParseSize reads a size as ResourcesSpec.Memory describes it.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("not a size: want bytes or a number with Ki, Mi, Gi, Ti, K, M, G or T, like 512Mi")
	}
	return n * mult, nil
}

// resources checks a step's resources: exec steps only.
func (v *validator) resources(key, f string, s Step) {
	r := s.Resources
	if r == nil {
		return
	}
	f += ".resources"
	if s.Exec == nil {
		v.add(key, f, "resources apply to exec steps only")
		return
	}
	if r.Memory != "" {
		n, err := ParseSize(r.Memory)
		switch {
		case err != nil:
			v.add(key, f+".memory", "%q: %v", r.Memory, err)
		case n < minMemory || n > maxMemory:
			v.add(key, f+".memory", "%q: must be at least 1Mi and at most 1Ti", r.Memory)
		}
	}
	if r.CPU != nil && (*r.CPU <= 0 || *r.CPU > maxCPU || math.IsNaN(*r.CPU)) {
		v.add(key, f+".cpu", "cpu %v: must be more than 0 and at most %d", *r.CPU, maxCPU)
	}
	if r.Pids != nil && (*r.Pids < 1 || *r.Pids > maxPids) {
		v.add(key, f+".pids", "pids %d: must be 1 to %d", *r.Pids, maxPids)
	}
	if r.Memory == "" && r.CPU == nil && r.Pids == nil {
		v.add(key, f, "resources is empty: set memory, cpu or pids, or leave it out")
	}
}

// normalizeResources fills d's resources from s (validated).
func normalizeResources(s *Step, d *StepDefinition) {
	r := s.Resources
	if r == nil || d.Kind != KindExec {
		return
	}
	rd := &ResourcesDefinition{}
	if r.Memory != "" {
		rd.MemoryBytes, _ = ParseSize(r.Memory)
	}
	if r.CPU != nil {
		rd.CPU = *r.CPU
	}
	if r.Pids != nil {
		rd.Pids = *r.Pids
	}
	d.Resources = rd
}
