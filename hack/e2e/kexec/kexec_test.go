//go:build lab

// Package kexec is the kexec handoff on a lab of its own: a BIOS and a UEFI machine, idle
// with their agents up, are each allocated twice — once booted into the stand-in Talos
// through their firmware (the agent reboots, the firmware PXE-boots, iPXE chains to the
// provider's cached Talos), once by kexec straight from the agent — and the BIOS one a
// third time with the kexec'd Talos kept from the provider (the network dropped), so
// that the handoff's deadline passes and the provider falls back to PXE once and a
// power cycle through the machine's BMC. The figures (allocation → Talos kernel both
// ways, and the firmware time the kexec skips) go to _out/e2e/kexec.txt.
package kexec

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/timeline"
)

const (
	// stepDeadline is generous: TCG, two machines and another lab on two cores.
	stepDeadline = 5 * time.Minute
	talosVersion = "v1.9.0"
	standin      = "TALOS-STANDIN schematic="
	// kexecTimeout is the provider's deadline for a kexec'd Talos to be seen up: short,
	// so that the fallback step does not wait long; the stand-in is up in ~20 s.
	kexecTimeout = 90 * time.Second
)

// Console lines that mark a boot's stages.
var (
	kernelLine   = timeline.Any("Linux version")
	restarting   = timeline.Any("reboot: Restarting system")
	ipxeBanner   = timeline.Any("iPXE initialising devices", "iPXE 1.")
	addressRe    = regexp.MustCompile(`lastAddress: (\S+)`)
	allocationRe = regexp.MustCompile(`allocation (\S+), schematic`)
	// configURLRe is the metadata URL on a boot script's kernel line (path, token).
	configURLRe = regexp.MustCompile(`talos\.config=http://[^/\s]+(/metadata/\S+\?token=(\S+))`)
	// kexecTokenRe is the metadata token on the kexec'd kernel's command line.
	kexecTokenRe = regexp.MustCompile(`Command line: .*talos\.config=\S+\?token=(\S+)`)
)

// figures are one machine's measurements.
type figures struct {
	cycle, kexec time.Duration // allocation → the Talos kernel's first line
	firmware     time.Duration // the agent's reboot → iPXE's banner (POST and option ROMs)
}

func TestKexecHandoffE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	bins := labtest.BuildBinaries(t, root, t.TempDir())
	dir, prefix := labtest.NewLab(t, "anvk", nil)

	cfg := bins.Config(dir, prefix)
	cfg.Machines = 2
	cfg.Firmware = []machine.Firmware{machine.BIOS, machine.UEFI}
	cfg.BMC = []lab.PowerOwner{lab.OwnerAPI, lab.OwnerAPI}
	// Idle machines keep their agents up: an allocation is then a kexec away.
	cfg.ProviderArgs = []string{"--power-idle-default", "on", "--kexec-timeout", kexecTimeout.String()}

	consoles := timeline.Follow(t.Context(), filepath.Join(dir, "machines", "*", "serial.log"), 50*time.Millisecond)

	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(bins.Anvilctl, state.ControlSocket())
	machines := state.MachineList()
	require.Len(t, machines, 2)

	var (
		mu      sync.Mutex
		results = map[string]figures{}
	)

	labtest.ForEach(machines, func(m *machine.Machine) {
		k := &kexecLab{t: t, ctl: ctl, consoles: consoles, m: m, state: state, config: filepath.Join(dir, "config-"+m.Name+".yaml"),
			api: net.JoinHostPort(labnet.ProviderAddr, strconv.Itoa(cfg.APIPort))}

		f, ok := k.run(m.Firmware == machine.BIOS)
		if ok {
			mu.Lock()
			results[m.Name] = f
			mu.Unlock()
		}
	})

	writeReport(t, root, machines, results)
}

// kexecLab drives one machine through the handoffs.
type kexecLab struct {
	t        testing.TB
	ctl      func(...string) (string, error)
	consoles *timeline.Consoles
	m        *machine.Machine
	state    *lab.State
	config   string
	// allocation is the machine's current allocation's ID.
	allocation string
	// api is the provider's HTTP API on the provisioning network (host:port).
	api string
}

func (k *kexecLab) run(withFallback bool) (figures, bool) {
	t, m := k.t, k.m

	var f figures

	// Registered, accepted, wiped: idle with its agent up.
	if !k.eventually("registered with its inventory", func(y string) bool { return strings.Contains(y, "name: vda") }) {
		return f, false
	}

	if !k.ok(k.ctl("machine", "accept", m.UUID)) || !k.wiped("") {
		return f, false
	}

	// 1. Through the firmware: the agent reboots, the firmware PXE-boots the cached Talos.
	if !k.ok(k.ctl("machine", "kexec", "never", m.UUID)) {
		return f, false
	}

	allocated, ok := k.allocate()
	if !ok {
		return f, false
	}

	kernel, ok := k.talosUp(allocated, "through the firmware")
	if !ok {
		return f, false
	}

	f.cycle = kernel.Sub(allocated)

	if reboot, ok := k.consoles.First(m.SerialLog(), allocated, restarting); assert.True(t, ok, "%s: the agent's reboot on the console", m.Name) {
		if banner, ok := k.consoles.First(m.SerialLog(), reboot.At, ipxeBanner); assert.True(t, ok, "%s: iPXE's banner after the reboot", m.Name) {
			f.firmware = banner.At.Sub(reboot.At)
		}
	}

	t.Logf("%s (%s): allocation → Talos kernel through the firmware %s (firmware %s; %s)", m.Name, m.Firmware,
		f.cycle.Round(100*time.Millisecond), f.firmware.Round(100*time.Millisecond),
		k.stages(allocated, "reboot: Restarting system", "iPXE initialising devices", "/assets/talos/", "Linux version"))

	// 2. Deallocated: wiped by its agent again, which then idles.
	wipe := k.lastWipe()
	if !k.ok(k.ctl("machine", "deallocate", m.UUID)) || !k.wiped(wipe) {
		return f, false
	}

	// 3. By kexec: no reboot, no firmware, straight from the agent into Talos.
	if !k.ok(k.ctl("machine", "kexec", "auto", m.UUID)) {
		return f, false
	}

	allocated, ok = k.allocate()
	if !ok {
		return f, false
	}

	// Meanwhile a host on the segment fetches the machine's boot script, whose token is
	// not the kexec order's: the configuration is refused to it.
	stranger := k.strangerAsks()

	kernel, ok = k.talosUp(allocated, "by kexec")
	if !ok {
		return f, false
	}

	f.kexec = kernel.Sub(allocated)

	k.strangerRefused(stranger)

	// Between the allocation and Talos' kernel (the stand-in reboots itself after its
	// install, as Talos does: that reboot is not on the way).
	assert.False(t, k.seenBetween(allocated, kernel, restarting), "%s: no reboot on the way to Talos by kexec", m.Name)
	assert.False(t, k.seenBetween(allocated, kernel, ipxeBanner), "%s: no firmware on the way to Talos by kexec", m.Name)
	assert.True(t, k.seenBetween(allocated, kernel, timeline.Any("kexec_core: Starting new kernel")), "%s: the agent's kexec", m.Name)

	k.eventually("the handoff confirmed", func(y string) bool { return strings.Contains(y, "confirmedAt:") }, "machinestatus")

	t.Logf("%s (%s): allocation → Talos kernel by kexec %s (%s)", m.Name, m.Firmware, f.kexec.Round(100*time.Millisecond),
		k.stages(allocated, "order received {\"order\": \"kexec-", "next kernel downloaded", "next kernel loaded", "kexec_core: Starting new kernel", "Linux version"))

	if !withFallback {
		return f, true
	}

	// 4. The kexec'd Talos cut off from the provider: the deadline passes, the provider
	// boots the machine through its BMC instead, and Talos comes up that way.
	wipe = k.lastWipe()
	if !k.ok(k.ctl("machine", "deallocate", m.UUID)) || !k.wiped(wipe) {
		return f, false
	}

	address := k.address()

	allocated, ok = k.allocate()
	if !ok {
		return f, false
	}

	if !k.eventually("the kexec loaded", func(y string) bool { return strings.Contains(y, "loadedAt:") }, "machinestatus") {
		return f, false
	}

	unblock := k.block(address)
	defer unblock()

	if !k.eventually("the fallback through the BMC", func(y string) bool {
		return strings.Contains(y, "handoffRebootID: handoff-") && strings.Contains(y, "Talos not seen up")
	}, "powerstatus") {
		return f, false
	}

	unblock()

	if _, ok := k.talosUp(allocated, "after the fallback"); !ok {
		return f, false
	}

	assert.True(t, hasLine(k.consoles, m.SerialLog(), allocated, ipxeBanner), "%s: the fallback went through the firmware", m.Name)

	return f, true
}

// strangerTry is what a host on the segment got asking for the machine's configuration
// with the token of a boot script it fetched for the machine's UUID.
type strangerTry struct {
	fetched     bool
	code        int
	body, token string
	// install is how the provider's event sink answered the stranger's install event.
	install codes.Code
}

// strangerAsks waits for the machine's agent to have loaded the kexec of its current
// allocation, then, from another host on the provisioning network, fetches the machine's
// boot script (as anyone may) and asks for the configuration with the token it carries.
func (k *kexecLab) strangerAsks() strangerTry {
	t, m := k.t, k.m

	loaded := regexp.MustCompile(`(?m)^\s*handoff:\n\s+allocationID: ` + regexp.QuoteMeta(k.allocation) + `\n\s+orderedAt: .*\n\s+loadedAt:`)
	if !k.eventually("the kexec loaded", func(y string) bool { return loaded.MatchString(y) }, "machinestatus") {
		return strangerTry{}
	}

	host := labtest.SegmentHost{NS: k.state.SiteNS}
	c := host.HTTPClient()

	defer c.CloseIdleConnections()

	query := "uuid=" + m.UUID + "&mac=" + m.MAC + "&arch=i386&platform=pcbios"
	if m.Firmware != machine.BIOS {
		query = "uuid=" + m.UUID + "&mac=" + m.MAC + "&arch=x86_64&platform=efi"
	}

	base := "http://" + k.api

	code, script, err := httpGet(t.Context(), c, base+"/ipxe/boot.ipxe?"+query)
	if !assert.NoError(t, err, "%s: the stranger's boot script", m.Name) || !assert.Equal(t, http.StatusOK, code, "%s: the stranger's boot script: %s", m.Name, script) {
		return strangerTry{}
	}

	u := configURLRe.FindStringSubmatch(script)
	if !assert.NotNil(t, u, "%s: the boot script of an allocated machine names its configuration:\n%s", m.Name, script) {
		return strangerTry{}
	}

	try := strangerTry{fetched: true, token: u[2]}

	try.code, try.body, err = httpGet(t.Context(), c, base+u[1])
	if !assert.NoError(t, err, "%s: the stranger's configuration request", m.Name) {
		return strangerTry{}
	}

	// Having fetched the boot script (the machine's last address is now the stranger's),
	// it says the machine installed, as Talos' event sink hears it.
	install, err := labtest.InstallRebooted()
	require.NoError(t, err)

	conn, err := host.PlainGRPC(k.api)
	require.NoError(t, err)

	defer conn.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	_, err = events.NewEventSinkServiceClient(conn).Publish(ctx, install)
	try.install = status.Code(err)

	return try
}

// strangerRefused checks what the stranger got once the machine is in Talos: nothing,
// and the machine was not held for it; its configuration went by the kexec path.
func (k *kexecLab) strangerRefused(try strangerTry) {
	t, m := k.t, k.m
	if !try.fetched {
		return
	}

	t.Logf("%s (%s): a host on the segment asked for its configuration with its boot script's token: %d %s", m.Name, m.Firmware, try.code, strings.TrimSpace(try.body))
	assert.Equal(t, http.StatusForbidden, try.code, "%s: a boot script's token while the machine is handed over by kexec: %s", m.Name, try.body)
	assert.NotContains(t, try.body, "kexec-"+m.Name, "%s: no configuration for the stranger", m.Name)
	assert.Equal(t, codes.PermissionDenied, try.install, "%s: the stranger's install event is refused: it fetched the boot script, not the configuration", m.Name)
	k.eventually("the machine's own Talos recorded installed", func(y string) bool {
		return strings.Contains(y, "installedAllocation: "+k.allocation)
	}, "machinestatus")

	status := k.get("machinestatus")
	assert.Contains(t, status, "path: kexec", "%s: the configuration went by the kexec path:\n%s", m.Name, status)
	assert.NotContains(t, k.get("intent"), "held:", "%s: a refused boot script's token holds nothing", m.Name)

	// The token the machine's Talos used was the kexec order's, not the boot script's.
	cmdline := kexecTokenRe.FindAllStringSubmatch(readFile(t, m.SerialLog()), -1)
	if assert.NotEmpty(t, cmdline, "%s: the kexec'd Talos' command line on its console", m.Name) {
		assert.NotEqual(t, try.token, cmdline[len(cmdline)-1][1], "%s: the boot script's token is not the kexec order's", m.Name)
	}
}

// httpGet fetches url with c: its status and at most 1 MiB of its body.
func httpGet(ctx context.Context, c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}

	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}

	defer resp.Body.Close()

	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))

	return resp.StatusCode, string(b), nil
}

func readFile(t testing.TB, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)

	return string(b)
}

// seenBetween says whether the console has a line match accepts from since to before.
func (k *kexecLab) seenBetween(since, before time.Time, match func(string) bool) bool {
	l, ok := k.consoles.First(k.m.SerialLog(), since, match)

	return ok && l.At.Before(before)
}

// stages says when each marker first appeared on the console after since: the way's
// breakdown, for the log.
func (k *kexecLab) stages(since time.Time, markers ...string) string {
	parts := make([]string, 0, len(markers))

	for _, marker := range markers {
		if l, ok := k.consoles.First(k.m.SerialLog(), since, timeline.Any(marker)); ok {
			parts = append(parts, fmt.Sprintf("%q +%.1fs", marker, l.At.Sub(since).Seconds()))
		}
	}

	return strings.Join(parts, ", ")
}

// ok asserts an anvilctl call succeeded.
func (k *kexecLab) ok(out string, err error) bool {
	return assert.NoError(k.t, err, "%s: %s", k.m.Name, out)
}

// get is the machine's resource of typ as YAML ("machine" by default).
func (k *kexecLab) get(typ ...string) string {
	kind := "machine"
	if len(typ) > 0 {
		kind = typ[0]
	}

	out, err := k.ctl("get", kind, k.m.UUID, "-o", "yaml")
	if err != nil {
		return ""
	}

	return out
}

// eventually waits for the machine's resource (machine unless typ says) to satisfy ok.
func (k *kexecLab) eventually(what string, ok func(yaml string) bool, typ ...string) bool {
	return assert.Eventually(k.t, func() bool { return ok(k.get(typ...)) }, stepDeadline, time.Second,
		"%s (%s): %s", k.m.Name, k.m.Firmware, what)
}

func (k *kexecLab) lastWipe() string {
	if m := regexp.MustCompile(`wipedID: (\S+)`).FindStringSubmatch(k.get("machinestatus")); m != nil {
		return m[1]
	}

	return ""
}

// wiped waits for a wipe other than the one before.
func (k *kexecLab) wiped(before string) bool {
	return k.eventually("wiped", func(y string) bool {
		m := regexp.MustCompile(`wipedID: (\S+)`).FindStringSubmatch(y)

		return m != nil && m[1] != before
	}, "machinestatus")
}

func (k *kexecLab) address() string {
	if m := addressRe.FindStringSubmatch(k.get()); m != nil {
		return m[1]
	}

	return ""
}

// allocate allocates the machine with a config of its own, and says when.
func (k *kexecLab) allocate() (time.Time, bool) {
	config := fmt.Sprintf("version: v1alpha1\nmachine:\n  type: worker\n  token: kexec-%s\n", k.m.Name)
	if !assert.NoError(k.t, os.WriteFile(k.config, []byte(config), 0o600)) {
		return time.Time{}, false
	}

	at := time.Now()
	out, err := k.ctl("machine", "allocate", k.m.UUID, "--talos-version", talosVersion, "--config", k.config)

	if m := allocationRe.FindStringSubmatch(out); m != nil {
		k.allocation = m[1]
	}

	return at, k.ok(out, err) && assert.Regexp(k.t, allocationRe, out)
}

// talosUp waits for the stand-in Talos booted after the allocation to have fetched its
// config and reported the install, and returns when its kernel printed its first line.
func (k *kexecLab) talosUp(allocated time.Time, how string) (time.Time, bool) {
	if !assert.Eventually(k.t, func() bool {
		return hasLine(k.consoles, k.m.SerialLog(), allocated, timeline.Any(standin)) &&
			hasLine(k.consoles, k.m.SerialLog(), allocated, timeline.Any("TALOS-STANDIN installed"))
	}, stepDeadline, 500*time.Millisecond, "%s (%s): the stand-in Talos did not come up %s", k.m.Name, k.m.Firmware, how) {
		return time.Time{}, false
	}

	kernel, ok := k.consoles.First(k.m.SerialLog(), allocated, kernelLine)

	return kernel.At, assert.True(k.t, ok, "%s: the Talos kernel's first line", k.m.Name)
}

// block drops what the machine at ip sends the provider's API (its Talos reaching the
// metadata server), until the returned function is called.
func (k *kexecLab) block(ip string) func() {
	require.NotEmpty(k.t, ip, "%s: no address to block", k.m.Name)

	return labtest.NFT(k.t, k.state.ProviderNS, "anvil-e2e-kexec-"+strings.ReplaceAll(ip, ".", "-"),
		fmt.Sprintf("\tchain input { type filter hook input priority 0; ip saddr %s tcp dport 50042 drop; }", ip))
}

// hasLine says whether the console has a line match accepts since the moment.
func hasLine(c *timeline.Consoles, serial string, since time.Time, match func(string) bool) bool {
	_, ok := c.First(serial, since, match)

	return ok
}

func writeReport(t testing.TB, root string, machines []*machine.Machine, results map[string]figures) {
	var b strings.Builder

	fmt.Fprintf(&b, "%-10s %-9s %18s %18s %8s %24s\n", "machine", "firmware", "firmware boot (s)", "kexec (s)", "ratio", "firmware time skipped (s)")

	for _, m := range machines {
		f, ok := results[m.Name]
		if !ok || f.kexec == 0 {
			fmt.Fprintf(&b, "%-10s %-9s %18s\n", m.Name, m.Firmware, "-")

			continue
		}

		fmt.Fprintf(&b, "%-10s %-9s %18.1f %18.1f %7.2fx %24.1f\n", m.Name, m.Firmware, f.cycle.Seconds(), f.kexec.Seconds(),
			f.cycle.Seconds()/f.kexec.Seconds(), f.firmware.Seconds())
	}

	text := "allocation → Talos kernel (TCG; the firmware's own time, the agent's reboot → iPXE's banner, beside it)\n" + b.String()
	t.Log(text)

	out := filepath.Join(root, "_out", "e2e", "kexec.txt")
	if assert.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755)) {
		assert.NoError(t, os.WriteFile(out, []byte(text), 0o644))
	}
}
