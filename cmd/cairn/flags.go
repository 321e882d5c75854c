package main

import (
	"strconv"
	"time"
)

// envInt reads an integer variable, or def when unset or malformed.
func envInt(e env, key string, def int) int {
	if v := e(key); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// envDuration reads a duration variable ("30s"), or def when unset or malformed.
func envDuration(e env, key string, def time.Duration) time.Duration {
	if v := e(key); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}
