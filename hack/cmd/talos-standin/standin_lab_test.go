//go:build lab

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/testprovider"
)

// TestMain removes the provider binaries the tests built once they are done.
func TestMain(m *testing.M) { os.Exit(testprovider.Main(m)) }

const (
	vmUUID = "4c4c4544-0000-1000-8000-0000000000e5"
	vmMAC  = "52:54:00:00:00:e5"
	// deadline is generous: TCG is slow and the machine is shared.
	deadline = 5 * time.Minute
	config   = "version: v1alpha1\nmachine:\n  type: worker\n  token: not-a-secret-in-a-test\n"
	// standinVersion reads talos.config.early (Talos 1.11 and later).
	standinVersion = "v1.13.0"
)

// TestLabBootsInQEMU boots the stand-in as an allocated machine boots Talos: the provider's
// Talos script, then the factory stand-in's PXE script, expanded as iPXE would, then its
// kernel and initramfs in QEMU (direct kernel boot, TCG). The stand-in reports what it
// was booted as, fetches its config and reports the install; the provider then sends
// the machine to its disk.
func TestLabBootsInQEMU(t *testing.T) {
	t.Parallel()

	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("needs qemu-system-x86_64 (make setup installs qemu-system-x86)")
	}

	kernel := lab.DebianKernel()
	if kernel == "" {
		t.Skip("needs a Debian kernel and its modules, /boot/vmlinuz-<v> and /lib/modules/<v> (make setup installs linux-image-amd64)")
	}

	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)

	dir := t.TempDir()
	bin := filepath.Join(dir, "talos-standin")
	assets := filepath.Join(dir, "talos-standin-assets")

	build := exec.Command("go", "build", "-o", bin, "./hack/cmd/talos-standin")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the stand-in: %s", out)

	imager := exec.Command("go", "run", "./imager/cmd/imager", "--agent", bin, "--kernel", kernel, "--out", assets, "--zstd-level", "3")
	imager.Dir = root
	out, err = imager.CombinedOutput()
	require.NoError(t, err, "building the stand-in's initramfs: %s", out)

	// The machine reaches the provider on the host's loopback through QEMU's user network,
	// at 10.0.2.2.
	p := testprovider.NewWith(t, testprovider.Options{Factory: []labfactory.Option{labfactory.WithAssets(assets)}, FactoryPXE: true},
		"--api-advertise-address", "10.0.2.2")
	p.Start()

	p.BootScript(vmUUID, vmMAC)
	p.WaitMachine(vmUUID)
	// Power is manual (no BMC credentials to provision) and the disks hold nothing: the
	// machine is ready at once.
	p.MustAnvilctl("machine", "bmc", "set", vmUUID, "--kind", "none")
	p.MustAnvilctl("machine", "accept", vmUUID, "--skip-wipe")

	configFile := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(configFile, []byte(config), 0o600))

	allocated := time.Now()

	// A Talos that reads talos.config.early: it fetches its config over HTTPS, trusting
	// the provider's CA given there.
	p.MustAnvilctl("machine", "allocate", vmUUID, "--talos-version", standinVersion, "--config", configFile)

	allocation := regexp.MustCompile(`(?m)^\s*allocation:\s*\n\s*id: (\S+)|allocationId: (\S+)`)
	machineYAML := p.MustAnvilctl("get", "machine", vmUUID, "-o", "yaml")
	t.Logf("allocated machine:\n%s", machineYAML)

	// The provider boots Talos from its cache of the factory's assets for the schematic,
	// once the factory knows it (the provider registers it in the background; until then
	// the script says to retry).
	var script string

	require.Eventually(t, func() bool {
		var code int
		code, script = p.BootScript(vmUUID, vmMAC)

		return code == http.StatusOK && strings.Contains(script, "/assets/talos/")
	}, 30*time.Second, 100*time.Millisecond, "no Talos boot from the provider's cache")

	// The boot's own arguments are on the kernel line, after the factory's cmdline: the
	// metadata URL names the machine and carries its token (nothing for iPXE to expand).
	require.NotContains(t, script, "${", script)

	metadata := regexp.MustCompile(`(?m)^kernel .* talos\.config\.early=\S+ talos\.config=https://10\.0\.2\.2:[0-9]+/metadata/([^?\s]+)\?token=(\S+)`).FindStringSubmatch(script)
	require.NotNil(t, metadata, "no talos.config= on the kernel line:\n%s", script)
	require.Equal(t, vmUUID, metadata[1], script)
	require.NotEmpty(t, metadata[2], script)

	schematic := regexp.MustCompile(`/assets/talos/([0-9a-f]{64})/`).FindStringSubmatch(script)
	require.NotNil(t, schematic, script)

	_, ok := p.Factory.Schematic(schematic[1])
	require.True(t, ok, "the schematic was not registered with the factory")

	pxe := script
	t.Logf("Talos boot script:\n%s", pxe)

	// As iPXE does: fetch the kernel and initramfs.
	var kernelURL, initrdURL, cmdline string

	for _, line := range strings.Split(pxe, "\n") {
		f := strings.SplitN(line, " ", 3)
		switch {
		case f[0] == "kernel" && len(f) == 3:
			kernelURL, cmdline = f[1], f[2]
		case f[0] == "initrd" && len(f) == 2:
			initrdURL = f[1]
		}
	}

	require.NotEmpty(t, kernelURL, pxe)
	require.NotEmpty(t, initrdURL, pxe)

	// As the machine would, from the provider: at its advertised address for the machine,
	// at its own for this test.
	local := strings.NewReplacer("http://10.0.2.2:", "http://127.0.0.1:")

	vmKernel, vmInitrd := filepath.Join(dir, "kernel"), filepath.Join(dir, "initramfs")
	require.NoError(t, os.WriteFile(vmKernel, get(t, local.Replace(kernelURL)), 0o644))
	require.NoError(t, os.WriteFile(vmInitrd, get(t, local.Replace(initrdURL)), 0o644))

	serial := filepath.Join(dir, "serial.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*deadline)

	vm := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-machine", "q35", "-cpu", "max", "-m", "1024", "-smp", "2",
		"-display", "none", "-no-reboot", "-serial", "file:"+serial,
		"-kernel", vmKernel, "-initrd", vmInitrd, "-append", cmdline,
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0,mac="+vmMAC,
		"-smbios", "type=1,uuid="+vmUUID,
	)

	var vmOut bytes.Buffer

	vm.Stdout, vm.Stderr = &vmOut, &vmOut
	require.NoError(t, vm.Start())

	booted := time.Now()

	// exited is closed when QEMU is gone, whoever waits for it.
	exited := make(chan struct{})

	go func() {
		vm.Wait() //nolint:errcheck // the exit shows in the serial log
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

	// Wall-clock milestones, read off the serial log as it grows.
	marks := map[string]time.Duration{}
	watch := map[string]string{
		"kernel": "Linux version", "pid1": "Run /init as init process", "network": "network up",
		"config": Prefix + " config", "installed": Prefix + " installed",
	}
	mark := func() {
		log, _ := os.ReadFile(serial)
		for name, s := range watch {
			if _, ok := marks[name]; !ok && bytes.Contains(log, []byte(s)) {
				marks[name] = time.Since(allocated)
			}
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)

	defer tick.Stop()

	timeout := time.After(deadline)

wait:
	for {
		select {
		case <-exited:
			break wait
		case <-timeout:
			t.Fatal("the stand-in did not report the install and reboot")
		case <-tick.C:
			mark()
		}
	}

	mark() // what came last, just before the reboot

	log, err := os.ReadFile(serial)
	require.NoError(t, err)

	sum := sha256.Sum256([]byte(config))
	assert.Contains(t, string(log), Prefix+" schematic="+schematic[1]+" version="+standinVersion)
	assert.Contains(t, string(log), Prefix+" cmdline=")
	assert.Contains(t, string(log), "talos.config=https://10.0.2.2:")
	assert.Contains(t, string(log), Prefix+" config status=200 bytes="+itoa(len(config))+" sha256="+hex.EncodeToString(sum[:]))
	assert.Contains(t, string(log), Prefix+" installed")
	assert.NotContains(t, string(log), "not-a-secret-in-a-test", "the config is never printed")
	assert.Contains(t, string(log), "reboot", "the stand-in reboots")

	m := allocation.FindStringSubmatch(machineYAML)
	require.NotNil(t, m, "no allocation id in:\n%s", machineYAML)
	allocID := m[1] + m[2]

	require.Eventually(t, func() bool {
		out, err := p.Anvilctl("get", "machine", vmUUID, "-o", "yaml")

		return err == nil && regexp.MustCompile(`installedAllocation: "?`+regexp.QuoteMeta(allocID)).MatchString(out)
	}, 30*time.Second, 200*time.Millisecond, "the machine is not recorded as installed")

	code, script := p.BootScript(vmUUID, vmMAC)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, script, "\nexit 1\n", "an installed machine boots from its disk")

	names := make([]string, 0, len(marks))
	for n := range marks {
		names = append(names, n)
	}

	sort.Slice(names, func(i, j int) bool { return marks[names[i]] < marks[names[j]] })

	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + " " + marks[n].Round(100*time.Millisecond).String() + "; ")
	}

	t.Logf("since allocation: QEMU started %s; %s", booted.Sub(allocated).Round(100*time.Millisecond), b.String())
}

func get(t *testing.T, url string) []byte {
	t.Helper()

	resp, err := http.Get(url)
	require.NoError(t, err)

	defer resp.Body.Close()

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)

	return body
}

func itoa(n int) string { return strconv.Itoa(n) }
