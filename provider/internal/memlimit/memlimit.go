// Package memlimit resolves the provider's soft memory limit: the size an operator gives,
// else a share of the memory its cgroup may use.
//
// Go's collector only knows GOGC, not the limit of the container or unit the provider
// runs in: with thousands of agent sessions its heap grows to twice what is live before
// a collection, and a cgroup limit below that kills it although the live heap fits. Go's
// soft limit (runtime/debug.SetMemoryLimit) makes it collect harder as the limit nears.
package memlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupShare is the share of the cgroup's limit taken as the soft limit when none is
// given: room for what is not Go heap (stacks are counted, mappings and the kernel's
// socket buffers are not).
const CgroupShare = 0.9

// unlimitedV1 is at or above what cgroup v1 reports for "no limit" (a page-rounded
// MaxInt64).
const unlimitedV1 = 1 << 62

// Source says where a limit came from.
type Source string

// Sources of a limit.
const (
	SourceNone   Source = "none"
	SourceFlag   Source = "flag"
	SourceCgroup Source = "cgroup"
)

// FS is where cgroup files are read: /proc/self/cgroup and /sys/fs/cgroup in production.
type FS struct {
	ProcSelfCgroup string
	CgroupRoot     string
}

// Host is the running system's.
var Host = FS{ProcSelfCgroup: "/proc/self/cgroup", CgroupRoot: "/sys/fs/cgroup"}

// Resolve returns the soft limit in bytes: the one given (parse reads sizes like 1GiB),
// else CgroupShare of the cgroup's memory limit, else 0 with SourceNone.
func Resolve(given string, parse func(string) (int64, error), sys FS) (int64, Source, error) {
	if strings.TrimSpace(given) != "" {
		n, err := parse(given)
		if err != nil {
			return 0, SourceNone, err
		}

		return n, SourceFlag, nil
	}

	limit, err := sys.cgroupLimit()
	if err != nil {
		return 0, SourceNone, err
	}

	if limit <= 0 {
		return 0, SourceNone, nil
	}

	return int64(float64(limit) * CgroupShare), SourceCgroup, nil
}

// cgroupLimit returns the memory limit of the process' cgroup, v2 or v1, or 0 for none.
// Inside a cgroup namespace the process' path is "/", so its own directory is the root.
func (sys FS) cgroupLimit() (int64, error) {
	v2, v1, err := sys.paths()
	if err != nil {
		return 0, err
	}

	candidates := []struct{ file, unlimited string }{
		{filepath.Join(sys.CgroupRoot, v2, "memory.max"), "max"},
		{filepath.Join(sys.CgroupRoot, "memory.max"), "max"},
		{filepath.Join(sys.CgroupRoot, "memory", v1, "memory.limit_in_bytes"), ""},
		{filepath.Join(sys.CgroupRoot, "memory", "memory.limit_in_bytes"), ""},
	}

	for _, c := range candidates {
		b, err := os.ReadFile(c.file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}

		if err != nil {
			return 0, fmt.Errorf("error reading the cgroup memory limit: %w", err)
		}

		s := strings.TrimSpace(string(b))
		if c.unlimited != "" && s == c.unlimited {
			return 0, nil
		}

		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("error reading the cgroup memory limit: %s holds %q", c.file, s)
		}

		if n >= unlimitedV1 {
			return 0, nil
		}

		return n, nil
	}

	return 0, nil
}

// paths returns the process' cgroup v2 path and its v1 memory controller's path.
func (sys FS) paths() (v2, v1 string, err error) {
	f, err := os.Open(sys.ProcSelfCgroup)
	if errors.Is(err, fs.ErrNotExist) {
		return "/", "/", nil
	}

	if err != nil {
		return "", "", fmt.Errorf("error reading the process' cgroup: %w", err)
	}
	defer f.Close()

	v2, v1 = "/", "/"

	// Lines are hierarchy-ID:controllers:path; v2's is 0::path.
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}

		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case containsController(parts[1], "memory"):
			v1 = parts[2]
		}
	}

	if err = sc.Err(); err != nil {
		return "", "", fmt.Errorf("error reading the process' cgroup: %w", err)
	}

	return filepath.Clean("/" + v2), filepath.Clean("/" + v1), nil
}

func containsController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}

	return false
}
