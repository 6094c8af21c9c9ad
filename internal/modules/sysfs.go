package modules

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Modaliases walks a sysfs devices tree (normally /sys/devices) and returns
// the distinct modaliases its devices announce, sorted. Unreadable entries
// are skipped: sysfs holds files that fail on read (ENODEV, EIO) and a
// device going away mid-walk must not stop the boot.
func Modaliases(devicesDir string) ([]string, error) {
	set := map[string]bool{}

	err := filepath.WalkDir(devicesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == devicesDir {
				return err
			}

			if d != nil && d.IsDir() {
				return fs.SkipDir
			}

			return nil
		}

		// WalkDir does not follow symlinks, so the subsystem/driver links
		// that loop back through sysfs are not entered.
		if d.IsDir() || d.Name() != "modalias" {
			return nil
		}

		b, err := os.ReadFile(path) //nolint:gosec // G122: sysfs, the kernel's own tree
		if err != nil {
			return nil //nolint:nilerr // see above: unreadable entries are skipped
		}

		if m := strings.TrimSpace(string(b)); m != "" {
			set[m] = true
		}

		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("walking %s: %w", devicesDir, err)
	}

	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}

	sort.Strings(out)

	return out, nil
}
