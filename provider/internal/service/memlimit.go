package service

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/anvil-metal/anvil/provider/internal/memlimit"
)

// applyMemoryLimit sets Go's soft memory limit from --memory-limit or the cgroup's, unless
// GOMEMLIMIT set one, and says what it is for the start-up log.
func applyMemoryLimit(given string) (string, error) {
	if v, set := os.LookupEnv("GOMEMLIMIT"); set {
		return v + " (GOMEMLIMIT)", nil
	}

	limit, source, err := memlimit.Resolve(given, func(s string) (int64, error) { return parseSize("--memory-limit", s) }, memlimit.Host)
	if err != nil {
		return "", err
	}

	if source == memlimit.SourceNone {
		return "none", nil
	}

	debug.SetMemoryLimit(limit)

	return fmt.Sprintf("%d MiB (%s)", limit>>20, source), nil
}
