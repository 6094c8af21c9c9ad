package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// RSSBytes is the resident set size of pid (VmRSS).
func RSSBytes(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("error reading the status of %d: %w", pid, err)
	}

	rss, err := parseRSS(b)
	if err != nil {
		return 0, fmt.Errorf("error reading the RSS of %d: %w", pid, err)
	}

	return rss, nil
}

func parseRSS(status []byte) (int64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}

		fields := strings.Fields(v)
		if len(fields) < 1 {
			break
		}

		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("error parsing VmRSS %q: %w", v, err)
		}

		return kb << 10, nil
	}

	return 0, fmt.Errorf("no VmRSS in the status")
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on Linux.
const clockTicks = 100

// CPUTime is the user and system CPU time pid has used.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("error reading the stat of %d: %w", pid, err)
	}

	d, err := parseCPUTime(b)
	if err != nil {
		return 0, fmt.Errorf("error reading the CPU time of %d: %w", pid, err)
	}

	return d, nil
}

func parseCPUTime(stat []byte) (time.Duration, error) {
	// Fields count from after the command name's closing parenthesis: the name may hold
	// spaces. utime and stime are fields 14 and 15 of the line, 12 and 13 after it.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in the stat")
	}

	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short stat: %d fields after the name", len(fields))
	}

	var ticks int64

	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("error parsing the stat's times: %w", err)
		}

		ticks += v
	}

	return time.Duration(ticks) * time.Second / clockTicks, nil
}
