//go:build lab

package bootassets_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/imager/internal/bootassets"
	"github.com/anvil-metal/anvil/imager/internal/kmod"
	"github.com/anvil-metal/anvil/internal/initramfs"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

// TestMain removes the provider binaries the tests built once they are done.
func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

const (
	vmUUID = "4c4c4544-0000-1000-8000-0000000000d4"
	vmMAC  = "52:54:00:00:00:d4"
	// bootDeadline is generous: TCG is slow and the machine is shared.
	bootDeadline = 5 * time.Minute
)

// TestLabAgentBootsInQEMU boots the agent's real boot assets in a QEMU machine (direct
// kernel boot, TCG) against the real provider: the agent comes up as PID 1, loads its
// modules, gets an address, registers with the machine's UUID, MAC and disk; accepted,
// it wipes the machine's real disk; allocated, it reboots it.
func TestLabAgentBootsInQEMU(t *testing.T) {
	t.Parallel()

	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("needs qemu-system-x86_64 (make setup installs qemu-system-x86)")
	}

	kernel, err := bootassets.FindKernel("/", "", "")
	if err != nil {
		t.Skipf("needs a Debian kernel and its modules (make setup installs linux-image-amd64): %v", err)
	}

	dir := t.TempDir()
	agent := filepath.Join(dir, "metal-agent")

	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", agent, "github.com/anvil-metal/anvil/agent/cmd/metal-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")

	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the agent: %s", out)

	assets := filepath.Join(dir, "agent")
	res, err := bootassets.Build(t.Context(), bootassets.Options{
		Agent: agent, Kernel: kernel, Modules: kmod.DefaultPatterns, OutDir: assets, Arch: "amd64",
		Compression: initramfs.Zstd, ZstdLevel: 3, Cmdline: bootassets.DefaultCmdline,
	})
	require.NoError(t, err)

	// The machine reaches the provider on the host's loopback through QEMU's user network,
	// at 10.0.2.2.
	// no_timer_check: under TCG on a loaded host the timer interrupt can miss the
	// kernel's IO-APIC timer check, which then panics.
	p := testprovider.New(t, false, "--agent-assets-dir", assets, "--api-advertise-address", "10.0.2.2",
		"--agent-kernel-args", "no_timer_check")
	p.Start()

	_, script := p.BootScript(vmUUID, vmMAC)
	require.Contains(t, script, "anvil.token=", script)

	kernelLine := script[strings.Index(script, "kernel "):]
	kernelLine = kernelLine[:strings.IndexByte(kernelLine, '\n')]
	cmdline := strings.SplitN(kernelLine, " ", 3)[2] // after "kernel <url>"

	// A disk with data at both ends, which the wipe must remove.
	disk := filepath.Join(dir, "disk.img")
	require.NoError(t, os.WriteFile(disk, nil, 0o600))
	require.NoError(t, os.Truncate(disk, 256<<20))
	writeAt(t, disk, 0, "PARTITION TABLE")
	writeAt(t, disk, 256<<20-512, "BACKUP GPT")
	writeAt(t, disk, 128<<20, "TENANT DATA")

	serial := filepath.Join(dir, "serial.log")
	ctx, cancel := context.WithTimeout(context.Background(), 3*bootDeadline)

	vm := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-machine", "q35", "-cpu", "max", "-m", "1024", "-smp", "2",
		"-display", "none", "-no-reboot", "-serial", "file:"+serial,
		"-kernel", res.Kernel, "-initrd", res.Initramfs, "-append", cmdline,
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,mac="+vmMAC,
		"-drive", "file="+disk+",format=raw,if=virtio",
		"-smbios", "type=1,manufacturer=Anvil Lab,product=QEMU Test,serial=LAB0001,uuid="+vmUUID,
	)

	var vmOut bytes.Buffer

	vm.Stdout, vm.Stderr = &vmOut, &vmOut
	require.NoError(t, vm.Start())

	// exited is closed when QEMU is gone, whoever waits for it.
	exited := make(chan struct{})

	go func() {
		_ = vm.Wait() // only that QEMU is gone matters
		close(exited)
	}()

	t.Cleanup(func() {
		cancel()
		<-exited

		if t.Failed() {
			log, _ := os.ReadFile(serial)
			t.Logf("machine serial log:\n%s\nqemu:\n%s", log, vmOut.String())
		}
	})

	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machine", vmUUID, "-o", "yaml")

		return err == nil && strings.Contains(out, "Anvil Lab") && strings.Contains(out, "name: vda")
	}, bootDeadline, time.Second, "the agent did not register with its inventory")

	machine := p.MustAnvilctl("get", "machine", vmUUID, "-o", "yaml")
	assert.Contains(t, machine, "serial: LAB0001")
	assert.Contains(t, machine, vmMAC)
	assert.Contains(t, machine, "driver: virtio_net")

	// Accepted: the agent wipes the disk, and the provider records it.
	p.MustAnvilctl("machine", "accept", vmUUID)
	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machine", vmUUID, "-o", "yaml")

		return err == nil && strings.Contains(out, "lastWipe:")
	}, bootDeadline, time.Second, "the wipe was not reported")

	assert.Equal(t, make([]byte, 16), readAt(t, disk, 0, 16), "the partition table is gone")
	assert.Equal(t, make([]byte, 10), readAt(t, disk, 256<<20-512, 10), "the backup GPT is gone")
	assert.Equal(t, "TENANT DATA", string(readAt(t, disk, 128<<20, 11)), "a fast wipe leaves the middle")

	// Allocated: the agent reboots the machine (QEMU exits on reboot with -no-reboot).
	p.MustAnvilctl("machine", "allocate", vmUUID, "--talos-version", "v1.9.0")

	select {
	case <-exited:
	case <-time.After(bootDeadline):
		t.Fatal("the machine did not reboot after allocation")
	}

	log, err := os.ReadFile(serial)
	require.NoError(t, err)

	start, registered, modules := timeline(string(log))
	require.NotZero(t, registered, "no registration in the serial log")
	t.Logf("agent timeline (seconds since kernel start): PID 1 %.3f, registered %.3f; module loading %.3f s; PID 1 to registered excluding modules %.3f s",
		start, registered, modules, registered-start-modules)
}

var (
	stamp     = regexp.MustCompile(`^\[\s*([0-9.]+)\]`)
	tookField = regexp.MustCompile(`"took": "([0-9.]+)(ms|s)"`)
)

// timeline reads the agent's own log: when it started, when it registered, how long
// modules took.
func timeline(log string) (start, registered, modules float64) {
	for _, line := range strings.Split(log, "\n") {
		m := stamp.FindStringSubmatch(line)
		if m == nil {
			continue
		}

		at, _ := strconv.ParseFloat(m[1], 64)

		switch {
		case strings.Contains(line, "metal agent starting") && start == 0:
			start = at
		case strings.Contains(line, "registered with the provider") && registered == 0:
			registered = at
		case strings.Contains(line, "kernel modules loaded"):
			if t := tookField.FindStringSubmatch(line); t != nil {
				v, _ := strconv.ParseFloat(t[1], 64)
				if t[2] == "ms" {
					v /= 1000
				}

				modules = v
			}
		}
	}

	return start, registered, modules
}

func writeAt(t *testing.T, path string, off int64, s string) {
	t.Helper()

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)

	defer f.Close()

	_, err = f.WriteAt([]byte(s), off)
	require.NoError(t, err)
}

func readAt(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()

	f, err := os.Open(path)
	require.NoError(t, err)

	defer f.Close()

	buf := make([]byte, n)
	_, err = f.ReadAt(buf, off)
	require.NoError(t, err, fmt.Sprintf("reading %s at %d", path, off))

	return buf
}
