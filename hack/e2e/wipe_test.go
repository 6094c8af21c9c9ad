//go:build lab

package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/ipmisim"
)

const (
	mib      = 1 << 20
	wipeDisk = 2 << 30 // small: the zero wipe must end within the deadlines under TCG
	// dataDisk is bios-0's second disk, which its wipe scope keeps.
	dataDisk   = 256 * mib
	dataSerial = "anvil-data"
	// holdFor is how long a pending machine's disk must stay untouched.
	holdFor = 60 * time.Second
)

// marks are the places the test writes data before the machines first boot: the ends
// (partition tables, signatures: a fast wipe zeroes them), btrfs' mirror superblock at
// 64 MiB (zeroed too) and the middle (a fast wipe leaves it; zeroes does not).
var marks = []struct {
	name     string
	off, len int64
}{
	{"start", 0, mib},
	{"btrfs mirror", 64 * mib, 4096},
	{"middle", wipeDisk / 2, mib},
	{"end", wipeDisk - mib, mib},
}

// TestWipeE2E is the wipe and reset flow on a lab of its own, two BIOS machines: bios-0
// powered through the lab's power API, bios-1 through a simulated IPMI BMC (ipmi_sim).
// Both disks carry data written on the host before the first boot.
//   - Pending for 60 s: both disks are byte-identical to what they were.
//   - bios-1 is rejected: no power, wipe or BMC call is ever made to it (its BMC's log),
//     its disk stays as it was.
//   - bios-0 is accepted: its initial (fast) wipe is verified on the host's disk image,
//     and its data disk, which its wipe scope keeps (all-except serial=anvil-data), is
//     byte-identical and reported kept; an install disk selector that matches both disks
//     is refused with both listed, before anything is allocated;
//     allocated, it boots the stand-in Talos; deallocated, the provider power-cycles it
//     back to the agent, which wipes (zeroes) — killed mid-way with the provider, the wipe
//     is not reported done, and after the restart it is done again, whole, and only then
//     is the machine available; its data disk is still byte-identical.
func TestWipeE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	for _, tool := range []string{"ipmi_sim", "ipmitool", "qemu-io", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make setup installs it)", tool)
		}
	}

	bin := t.TempDir()
	bins := labtest.BuildBinaries(t, labtest.RepoRoot(t), bin)
	dir, prefix := labtest.NewLab(t, "anvw", nil)

	cfg := bins.Config(dir, prefix)
	cfg.Machines, cfg.DiskSize = 2, "2G"
	cfg.Firmware = []machine.Firmware{machine.BIOS}
	cfg.BMC = []lab.PowerOwner{lab.OwnerAPI, lab.OwnerIPMI}
	cfg.DataDisks = [][]machine.DataDisk{{{Serial: dataSerial, Size: "256M"}}, nil}

	// The disks, with data on them, before anything boots; and a copy of each to compare.
	names := []string{"bios-0", "bios-1"}
	before := map[string]string{}

	for _, name := range names {
		disk := filepath.Join(dir, "machines", name, "disk.qcow2")
		labtest.NewDisk(t, disk, wipeDisk)

		for _, m := range marks {
			labtest.WritePattern(t, disk, "0xa5", m.off, m.len)
		}

		before[name] = filepath.Join(bin, name+"-before.qcow2")
		labtest.Exec(t, "cp", "--sparse=always", disk, before[name])
	}

	// bios-0's data disk: a pattern at both ends and in the middle, which no wipe touches.
	data := filepath.Join(dir, "machines", "bios-0", "data-0.qcow2")
	labtest.NewDisk(t, data, dataDisk)

	for _, off := range []int64{0, dataDisk / 2, dataDisk - mib} {
		labtest.WritePattern(t, data, "0x5a", off, mib)
	}

	dataBefore := filepath.Join(bin, "data-before.qcow2")
	labtest.Exec(t, "cp", "--sparse=always", data, dataBefore)

	start := time.Now()
	step := func(what string, since time.Time) {
		t.Logf("%-62s %6.1fs (t=%.1fs)", what, time.Since(since).Seconds(), time.Since(start).Seconds())
	}

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	machines := state.MachineList()
	require.Len(t, machines, 2)

	a, b := machines[0], machines[1]
	require.Equal(t, lab.OwnerAPI, state.BMC(a.Name).Owner)
	require.Equal(t, lab.OwnerIPMI, state.BMC(b.Name).Owner)

	simLog := state.BMCLog(b)
	labSessions := strings.Count(readFile(simLog), ipmisim.SessionLine)

	ctl := labtest.Anvilctl(bins.Anvilctl, state.ControlSocket())

	yamlOf := func(m *machine.Machine) string {
		out, _ := ctl("get", "machine", m.UUID, "-o", "yaml")

		return out
	}

	// 1. Both register and are left pending for holdFor: nothing is written to their disks.
	for _, m := range machines {
		require.Eventually(t, func() bool {
			y := yamlOf(m)

			return strings.Contains(y, "name: vda") && strings.Contains(y, m.Serial)
		}, stepDeadline, time.Second, "%s did not register", m.Name)
	}

	registered := time.Now()
	step("power-on → both agents registered (pending)", start)

	time.Sleep(holdFor)

	for _, m := range machines {
		assertSameDisk(t, before[m.Name], m.Disk(), "%s's disk after %v pending", m.Name, holdFor)
		assert.Contains(t, yamlOf(m), "acceptance: pending", m.Name)
	}

	step(fmt.Sprintf("pending %v: both disks byte-identical", holdFor), registered)

	// 2. bios-1 is rejected: its agent lets go (the machine reboots to its own disk).
	out, err := ctl("machine", "reject", b.UUID)
	require.NoError(t, err, out)

	// 3. bios-0 is accepted, its data disk kept: the initial wipe (fast) is verified on
	// the host's images.
	out, err = ctl("machine", "wipe-scope", "all-except", a.UUID, "--keep", "serial="+dataSerial)
	require.NoError(t, err, out)
	assert.Contains(t, out, "wipe scope all-except serial="+dataSerial)

	t0 := time.Now()

	out, err = ctl("machine", "accept", a.UUID)
	require.NoError(t, err, out)

	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?s)lastWipe:.*device: vda.*method: discard, zeroed edges.*verified:`).MatchString(yamlOf(a))
	}, stepDeadline, time.Second, "no fast wipe of vda reported")
	step("accept → initial fast wipe reported", t0)

	y := yamlOf(a)
	assert.Regexp(t, `(?s)lastWipe:.*device: vdb\s+skipped: \W?kept: matches the wipe\W+s keep selector \(serial=`+dataSerial+`\)\W?\s+kept: true`, y,
		"the data disk is reported kept")
	assertSameDisk(t, dataBefore, data, "the kept data disk after the fast wipe")

	// An install disk selector that matches both disks is refused, both listed, and
	// nothing is allocated; a dry run names the disk one resolves to.
	out, err = ctl("machine", "allocate", a.UUID, "--talos-version", talosVersion, "--install-disk", "transport=virtio", "--dry-run")
	require.Error(t, err, out)
	t.Logf("anvilctl machine allocate --install-disk transport=virtio --dry-run: %s", strings.TrimSpace(out))
	assert.Contains(t, out, `install disk selector "transport=virtio" matches 2 disks: vda (2.1 GB, transport virtio); vdb (268 MB, transport virtio, serial `+dataSerial+`)`)

	out, err = ctl("machine", "allocate", a.UUID, "--talos-version", talosVersion, "--install-disk", "size<1GB", "--dry-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, "dry run, nothing allocated")
	assert.Contains(t, out, "installed to vdb (268 MB, transport virtio, serial "+dataSerial+"), named serial="+dataSerial)
	assert.NotContains(t, yamlOf(a), "allocation:", "a dry run allocates nothing")
	t.Logf("anvilctl machine allocate --install-disk 'size<1GB' --dry-run: %s", strings.TrimSpace(out))

	for _, m := range marks {
		want := "0"
		if m.name == "middle" {
			want = "0xa5" // a fast wipe promises the identifying regions, not the middle
		}

		labtest.AssertPattern(t, a.Disk(), m.off, m.len, want, "after the fast wipe: "+m.name)
	}

	// 4. Allocated, it boots the stand-in Talos, which reports the install.
	t0 = time.Now()

	out, err = ctl("machine", "allocate", a.UUID, "--talos-version", talosVersion)
	require.NoError(t, err, out)

	require.Eventually(t, func() bool {
		return strings.Contains(readFile(a.SerialLog()), standin+" installed") &&
			strings.Contains(yamlOf(a), "installedAllocation:")
	}, stepDeadline, time.Second, "the allocated machine did not boot and install the stand-in Talos")
	step("allocate → stand-in Talos installed", t0)

	// 5. Deallocated: the zero wipe this time, interrupted by killing the machine and the
	// provider; it must not be reported done, and is done again after the restart.
	cfg.ProviderArgs = []string{"--wipe-mode", "zeroes"}
	require.NoError(t, state.RestartProvider(t.Context(), cfg))

	t0 = time.Now()
	boots := agentBoots(t, state.ProviderLog(), a.UUID)
	serialBefore := len(readFile(a.SerialLog()))

	out, err = ctl("machine", "deallocate", a.UUID)
	require.NoError(t, err, out)

	owed := labtest.OwedWipe(ctl, a.UUID)
	require.NotEmpty(t, owed)

	boots = waitNewBoot(t, state.ProviderLog(), a.UUID, boots, "deallocate (the provider power-cycles the machine through the power API)")
	step("deallocate → power cycle → agent again", t0)

	// The agent logs each disk as it starts on it: kill everything at once, mid-way
	// through the 2 GiB.
	require.Eventually(t, func() bool {
		return strings.Contains(readFile(a.SerialLog())[serialBefore:], `wiping disk {"disk": "vda", "mode": "zeroes"`)
	}, stepDeadline, 100*time.Millisecond, "the zero wipe did not start")

	require.NoError(t, syscall.Kill(state.ProviderPID, syscall.SIGKILL), "killing the provider")
	require.NoError(t, a.Stop(t.Context()), "killing the machine mid-wipe")
	step("zero wipe started → machine and provider killed", t0)

	require.NoError(t, state.RestartProvider(t.Context(), cfg))

	y = yamlOf(a)
	assert.False(t, labtest.HasField(y, "wipedID", owed), "an interrupted wipe is never reported done")

	// The provider sees a machine that owes a wipe switched off: it powers it on (PXE
	// once), the agent wipes again, whole.
	t0 = time.Now()

	require.Eventually(t, func() bool { return labtest.HasField(yamlOf(a), "wipedID", owed) }, stepDeadline, time.Second,
		"the interrupted wipe was not done again after the restart")
	step("restart → powered on → zero wipe done again", t0)

	y = yamlOf(a)
	assert.Regexp(t, `(?s)lastWipe:.*id: `+owed+`.*device: vda.*method: zeroes`, y)
	assert.Contains(t, y, "acceptance: accepted")
	assert.NotContains(t, y, "allocation:", "available: accepted and not allocated")
	assert.Len(t, agentBoots(t, state.ProviderLog(), a.UUID), len(boots)+1, "one more agent boot: the one after the restart")

	labtest.AssertPattern(t, a.Disk(), 0, wipeDisk, "0", "the whole disk after the zero wipe")
	assertSameDisk(t, dataBefore, data, "the kept data disk after the zero wipe")
	assert.Regexp(t, `(?s)id: `+owed+`.*device: vdb\s+skipped: 'kept: .*\s+kept: true`, y, "kept in the zero wipe's report too")

	if _, report, ok := strings.Cut(y, "lastWipe:"); ok {
		t.Logf("bios-0's erase report:\nlastWipe:%s", report)
	}

	// 6. bios-1, rejected all along: no BMC session from the provider, no wipe, disk as
	// it was.
	assert.Equal(t, labSessions, strings.Count(readFile(simLog), ipmisim.SessionLine), "the provider opened a session with a rejected machine's BMC")

	y = yamlOf(b)
	assert.Contains(t, y, "acceptance: rejected")
	assert.NotContains(t, y, "lastWipe:")
	assert.NotContains(t, y, "bmcOrder:", "no BMC provisioning on a rejected machine")
	assertSameDisk(t, before[b.Name], b.Disk(), "the rejected machine's disk")
}

// assertSameDisk compares two images' contents; -U reads a disk that a running QEMU holds.
func assertSameDisk(t testing.TB, want, got string, msg string, args ...any) {
	t.Helper()

	out, err := exec.Command("qemu-img", "compare", "-U", "-f", "qcow2", "-F", "qcow2", want, got).CombinedOutput()
	assert.NoError(t, err, "%s: %s", fmt.Sprintf(msg, args...), out)
}
