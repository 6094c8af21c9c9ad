// Package initsys does what PID 1 owes Linux: the pseudo filesystems
// mounted, orphans reaped, a console logger, panics contained, and power
// off or reboot done cleanly. Start and Halt put these in order for the
// programs that run as init (the agent, the wipe test's init).
package initsys

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Mount is one filesystem PID 1 mounts.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
	// When, if set, is checked (with the root prefix) before mounting;
	// a false answer skips the mount.
	When func(root string) bool
}

// Mounts are the filesystems the agent needs, in order: each target lies on
// one mounted before it.
var Mounts = []Mount{
	{Source: "proc", Target: "/proc", FSType: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
	{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID, Data: "mode=0755"},
	{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "mode=0620,ptmxmode=0666"},
	{Source: "tmpfs", Target: "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755"},
	{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
	{
		Source: "efivarfs", Target: "/sys/firmware/efi/efivars", FSType: "efivarfs",
		Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC,
		// Only UEFI boots have it; BIOS machines are fine without.
		When: func(root string) bool { return exists(filepath.Join(root, "/sys/firmware/efi/efivars")) },
	},
}

// MountAll mounts ms under root ("" or "/" for the real root), creating
// targets as needed. Targets already mounted are left alone, so it can run
// twice, or in a system whose init already mounted /proc.
func MountAll(logger *zap.Logger, root string, ms []Mount) error {
	if logger == nil {
		logger = zap.NewNop()
	}

	var errs []error

	for _, m := range ms {
		target := filepath.Join(root, m.Target)
		if root == "" {
			target = filepath.Clean(m.Target)
		}

		if m.When != nil && !m.When(root) {
			continue
		}

		// Reread each time: the first mount may be /proc itself.
		mounted, _ := mountedAt(filepath.Join(root, "/proc/self/mountinfo"))
		if mounted[target] {
			logger.Debug("already mounted", zap.String("target", target))

			continue
		}

		if err := os.MkdirAll(target, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("creating %s: %w", target, err))

			continue
		}

		err := unix.Mount(m.Source, target, m.FSType, m.Flags, m.Data)
		if errors.Is(err, unix.EBUSY) {
			// Mounted, though mountinfo could not say so (no /proc yet).
			continue
		}

		if err != nil {
			errs = append(errs, fmt.Errorf("mounting %s on %s: %w", m.FSType, target, err))

			continue
		}

		logger.Debug("mounted", zap.String("fstype", m.FSType), zap.String("target", target))
	}

	return errors.Join(errs...)
}

// mountedAt reads a mountinfo file and returns the set of mount points.
func mountedAt(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	return parseMountinfo(f)
}

// parseMountinfo returns the mount points in /proc/<pid>/mountinfo text
// (field 5, octal escapes such as \040 undone). Malformed lines are skipped.
func parseMountinfo(r io.Reader) (map[string]bool, error) {
	out := map[string]bool{}

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)

	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}

		out[unescapeOctal(f[4])] = true
	}

	return out, sc.Err()
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}

	var b strings.Builder

	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3

			continue
		}

		b.WriteByte(s[i])
	}

	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func exists(path string) bool {
	_, err := os.Stat(path)

	return err == nil || !errors.Is(err, fs.ErrNotExist)
}
