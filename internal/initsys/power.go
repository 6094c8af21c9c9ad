package initsys

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// IsPID1 reports whether this process is init.
func IsPID1() bool { return os.Getpid() == 1 }

// PowerOff flushes filesystems and powers the machine off. It returns only
// on failure.
func PowerOff() error { return reboot(unix.LINUX_REBOOT_CMD_POWER_OFF, "power off") }

// Reboot flushes filesystems and restarts the machine. It returns only on
// failure.
func Reboot() error { return reboot(unix.LINUX_REBOOT_CMD_RESTART, "reboot") }

func reboot(cmd int, what string) error {
	// The agent may have written to disks (wipe, config); reboot(2) does
	// not flush them itself.
	unix.Sync()

	if err := unix.Reboot(cmd); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}

	return nil
}
