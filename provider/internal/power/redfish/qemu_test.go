//go:build lab

package redfish

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/power"
)

// What a lab machine's serial console shows (SeaBIOS through the serial graphics adapter,
// iPXE, and the disk system of hack/internal/diskimage).
const (
	biosStart  = "SeaBIOS (version"
	diskBoot   = "Booting from Hard Disk"
	netBoot    = "iPXE initialising devices"
	diskSystem = "ANVIL-DISK booted from disk machine=redfish-qemu"
)

// TestLabQEMUBootOverride proves on a real machine that the backend's PXE-once and power
// cycle change what it boots: a lab machine set up to boot its disk first (and with no
// PXE server: QEMU's user network answers DHCP without a boot file, so iPXE gives up and
// the firmware goes on to the disk) boots its disk; after SetPXEOnce and PowerCycle it
// tries the network first; the boot after that is from the disk again.
func TestLabQEMUBootOverride(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU machine three times (about a minute under TCG); skipped with -short")
	}

	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (Debian qemu-system-x86)")
	}

	if kernels, _ := filepath.Glob("/boot/vmlinuz-*"); len(kernels) == 0 { // a constant pattern
		t.Skip("no kernel in /boot for the disk system")
	}

	for _, tool := range []string{"sfdisk", "mkfs.vfat", "mmd", "mcopy", "syslinux", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: install fdisk dosfstools mtools syslinux syslinux-common qemu-utils", tool)
		}
	}

	dir := filepath.Join(t.TempDir(), "m")
	serial := filepath.Join(dir, "serial.log")

	// Registered before the service, so it runs after the service stopped: the machine
	// outlives its BMC, as QEMU runs daemonized.
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(serial) // the log is for reading only
			t.Logf("serial log:\n%s", b)
		}

		killQEMU(t, filepath.Join(dir, "qemu.pid"))
	})

	start := time.Now()
	s := startService(t, "-machine-dir", dir, "-machine-name", "redfish-qemu", "-seed", "redfish-test",
		"-firmware", "bios", "-disk-first", "-netdev", "user,restrict=on", "-disk-system", "-system-id", "System.Embedded.1")
	t.Logf("service with a bootable disk ready after %v", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	c, err := Dial(ctx, endpoint(s))
	require.NoError(t, err)

	defer c.Close()

	// mark is where the next output starts; boot is one boot's output from there.
	mark := func() int {
		b, _ := os.ReadFile(serial) // no log yet: 0

		return len(b)
	}

	boot := func(from int, want string, timeout time.Duration) string {
		t.Helper()

		deadline := time.Now().Add(timeout)

		for {
			b, _ := os.ReadFile(serial) // polled until the deadline
			out := string(b[min(from, len(b)):])

			// From the firmware's start on: a machine stopped mid-boot may have written
			// more of its previous boot after the mark.
			if i := strings.Index(out, biosStart); i >= 0 && strings.Contains(out[i:], want) {
				return out[i:]
			}

			if time.Now().After(deadline) {
				t.Fatalf("no %q on the serial console after %v", want, timeout)
			}

			time.Sleep(200 * time.Millisecond)
		}
	}

	waitOff := func() {
		t.Helper()

		deadline := time.Now().Add(time.Minute)

		for {
			st, err := c.PowerState(ctx)
			require.NoError(t, err)

			if !st {
				return
			}

			if time.Now().After(deadline) {
				t.Fatal("the disk system did not power the machine off")
			}

			time.Sleep(200 * time.Millisecond)
		}
	}

	// 1. Disk first: the disk boots, no network attempt.
	at := mark()
	t0 := time.Now()

	require.NoError(t, c.PowerOn(ctx))

	out := boot(at, diskSystem, 2*time.Minute)
	assert.Contains(t, out, diskBoot)
	assert.NotContains(t, out, netBoot, "a disk-first machine does not try the network")
	waitOff()
	t.Logf("boot 1 (disk): %v", time.Since(t0).Round(time.Millisecond))

	// 2. Power on, and while it boots its disk: PXE once, power cycle.
	at = mark()
	t0 = time.Now()

	require.NoError(t, c.PowerOn(ctx))
	boot(at, diskBoot, time.Minute)

	st, err := c.PowerState(ctx)
	require.NoError(t, err)
	t.Logf("powered on when cycled: %t", st)

	require.NoError(t, c.SetPXEOnce(ctx, power.BootModeLegacy))

	at = mark()

	require.NoError(t, c.PowerCycle(ctx))

	out = boot(at, diskSystem, 2*time.Minute)
	net, disk := strings.Index(out, netBoot), strings.Index(out, diskBoot)
	require.GreaterOrEqual(t, net, 0, "the network is tried after the override")
	assert.Less(t, net, disk, "the network before the disk")
	waitOff()
	t.Logf("boot 2 (network, then disk): %v", time.Since(t0).Round(time.Millisecond))

	sys, _, err := c.(*client).load(ctx)
	require.NoError(t, err)
	assert.Equal(t, "Disabled", string(sys.Boot.BootSourceOverrideEnabled), "the override is spent")

	// 3. The boot after that: the disk again.
	at = mark()
	t0 = time.Now()

	require.NoError(t, c.PowerCycle(ctx), "on an off machine: power on")

	out = boot(at, diskSystem, 2*time.Minute)
	assert.Contains(t, out, diskBoot)
	assert.NotContains(t, out, netBoot, "the override was for one boot")
	waitOff()
	t.Logf("boot 3 (disk): %v; whole test %v", time.Since(t0).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// killQEMU stops a daemonized QEMU by its pid file, whatever the test's outcome.
func killQEMU(t *testing.T, pidFile string) {
	t.Helper()

	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}

	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}

	// Only the test's own QEMU: a stale pid file could name someone else's process.
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmdline), filepath.Dir(pidFile)) {
		return
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Errorf("killing QEMU %d: %v", pid, err)

		return
	}

	for range 50 {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}

		time.Sleep(100 * time.Millisecond)
	}
}
