// Command disk-system is the /init of the small system the lab puts on a
// machine's disk: it proves on the serial console that the firmware booted the
// disk (not the network), then powers the machine off so a test sees QEMU exit.
//
// It must be built static (CGO_ENABLED=0): the initramfs holds nothing else.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MachineFile holds the machine's name in the initramfs; diskimage writes it.
const MachineFile = "/etc/anvil-machine"

func main() {
	name := "unknown"
	if b, err := os.ReadFile(MachineFile); err == nil {
		name = strings.TrimSpace(string(b))
	}
	line := fmt.Sprintf("ANVIL-DISK booted from disk machine=%s\n", name)

	out := os.Stdout
	if _, err := out.WriteString(line); err != nil {
		// No /dev/console: say it through the kernel log, which reaches the
		// serial console synchronously.
		if k, kerr := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); kerr == nil {
			_, _ = k.WriteString(line)
			_ = k.Close()
		}
	} else {
		// Wait for the UART to send the line before power-off cuts it short.
		_ = unix.IoctlSetInt(int(out.Fd()), unix.TCSBRK, 1)
	}

	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(os.Stderr, "ANVIL-DISK power off: %v\n", err)
	}
	// init must not exit (the kernel would panic); wait for the power to go.
	for {
		time.Sleep(time.Hour)
	}
}
