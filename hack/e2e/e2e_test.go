//go:build lab

// Package e2e is Anvil's end-to-end flow on a lab of its own (hack/internal/lab):
// machines of the three firmware kinds PXE-boot in parallel through real firmware and
// iPXE, their agents register, are accepted (and wiped) and allocated through anvilctl,
// then boot the Image Factory stand-in's "Talos" for exactly their schematic and
// version, fetch their config from the metadata server and report the install.
package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/diskimage"
	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/timeline"
	"github.com/anvil-metal/anvil/internal/netns"
)

const (
	// stepDeadline is generous: under TCG power-on to the agent is ~20–50 s, and three
	// machines share two cores.
	stepDeadline = 5 * time.Minute
	talosVersion = "v1.9.0"
	extension    = "siderolabs/intel-ucode"
	standin      = "TALOS-STANDIN"

	// defaultDiskMethods gives each firmware kind the boot-from-disk method a site would
	// use with it, so that the suite boots from disk by every method: sanboot works only
	// under BIOS in Debian's iPXE; under OVMF the firmware goes on to its HTTPv4 boot
	// option, which Anvil answers with iPXE again (sent back again), then to the disk.
	// arm64 has no iPXE: its UKI's URL answers 404, whatever the provider's method.
	defaultDiskMethods = "ipxe-sanboot:bios,ipxe-exit:uefi,http-404:uefi-pxe,ipxe-exit:uefi-http,http-404:arm64"
)

var (
	schematicRe = regexp.MustCompile(`allocation (\S+), schematic (\S+)\)`)
	tokenRe     = regexp.MustCompile(`talos\.config=http://(?:10\.77\.0\.1|\[fd77::1\]):50042/metadata/([0-9a-f-]+)\?token=(\S+)`)
)

// result is what one machine went through, for the report.
type result struct {
	m                      *machine.Machine
	registered, kernel     time.Duration // since power-on; since allocation
	installed              time.Duration // since allocation
	allocation, schematic  string
	token                  string
	wipe                   string
	registeredOK, bootedOK bool
	diskMethod             string
	diskBoot               time.Duration // power-on → the disk's system, after the install
	diskOK                 bool
	allocated              time.Time
	agent, talos           timeline.Stages
}

// stages cuts the machine's boots into stages from its console and the provider's log.
func (r *result) stages(t testing.TB, consoles *timeline.Consoles, providerLog string) {
	// QEMU writes its pid file as it starts the machine: the power-on.
	st, err := os.Stat(r.m.PIDFile())
	if !assert.NoError(t, err, "%s: the pid file", r.m.Name) {
		return
	}

	entries, err := timeline.ReadProviderLog(providerLog)
	if !assert.NoError(t, err) {
		return
	}

	r.agent = timeline.Agent(consoles, r.m.SerialLog(), entries, r.m.UUID, st.ModTime())
	if r.bootedOK {
		r.talos = timeline.Talos(consoles, r.m.SerialLog(), entries, r.m.UUID, r.allocated, standin)
	}
}

// labKinds are the machines of the flow: one per firmware kind of ANVIL_E2E_FIRMWARE
// (bios,uefi,uefi-pxe by default), with the ports of ANVIL_E2E_NICS in turn (1 each by
// default; a machine with 2 boots from its second), on a site whose DHCP server is the
// provider's when ANVIL_E2E_FULL_DHCP=1, on an IPv6-only network when ANVIL_E2E_IPV6=1.
// make e2e runs its matrix through them.
func labKinds(t testing.TB) (firmware []machine.Firmware, nics []int, fullDHCP, ipv6 bool) {
	spec := os.Getenv("ANVIL_E2E_FIRMWARE")
	if spec == "" {
		spec = "bios,uefi,uefi-pxe"
	}

	for _, f := range strings.Split(spec, ",") {
		fw, err := machine.ParseFirmware(f)
		require.NoError(t, err, "ANVIL_E2E_FIRMWARE")

		firmware = append(firmware, fw)
	}

	if spec := os.Getenv("ANVIL_E2E_NICS"); spec != "" {
		for _, n := range strings.Split(spec, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(n))
			require.NoError(t, err, "ANVIL_E2E_NICS")

			nics = append(nics, v)
		}
	}

	return firmware, nics, os.Getenv("ANVIL_E2E_FULL_DHCP") == "1", os.Getenv("ANVIL_E2E_IPV6") == "1"
}

// diskMethods pairs each boot-from-disk method with the machine that proves it, by
// firmware; ANVIL_E2E_DISK_METHODS overrides it (method:firmware,…; "none" skips the step).
func diskMethods() map[machine.Firmware]string {
	spec := os.Getenv("ANVIL_E2E_DISK_METHODS")
	if spec == "" {
		spec = defaultDiskMethods
	}

	out := map[machine.Firmware]string{}

	for _, pair := range strings.Split(spec, ",") {
		if method, fw, ok := strings.Cut(pair, ":"); ok {
			out[machine.Firmware(fw)] = method
		}
	}

	return out
}

// TestE2E is the whole flow; see the package comment. ANVIL_E2E_RUNS=N runs it N times
// on a fresh lab each (the disk step in the first run only) and reports each stage's
// median (make figures).
func TestE2E(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	b := binaries{
		provider: filepath.Join(bin, "provider"), anvilctl: filepath.Join(bin, "anvilctl"), factory: filepath.Join(bin, "lab-factory"),
		diskInit: filepath.Join(bin, "disk-init"),
	}

	labtest.GoBuild(t, root, b.provider, "./provider/cmd/provider")
	labtest.GoBuild(t, root, b.anvilctl, "./provider/cmd/anvilctl")
	labtest.GoBuild(t, root, b.factory, "./hack/cmd/lab-factory")

	firmware, _, _, _ := labKinds(t)

	arm64 := slices.Contains(firmware, machine.ARM64)
	if arm64 {
		labtest.RequireARM64Host(t)
	}

	b.agent = labtest.AgentAssets(t, root, bin)
	b.standin = standinAssets(t, root, bin, arm64)

	if arm64 {
		// One directory of agent assets for the provider: make agent-arm64 adds the arm64
		// ones to _out/agent.
		b.agent = labtest.ARM64AgentAssets(t, root)
		if slices.ContainsFunc(firmware, func(f machine.Firmware) bool { return f != machine.ARM64 }) {
			require.True(t, lab.BootAssetsExist(b.agent), "a lab of arm64 and amd64 machines needs both in %s: make agent-initramfs agent-arm64", b.agent)
		}
	}

	runs := 1
	if v := os.Getenv("ANVIL_E2E_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "ANVIL_E2E_RUNS")
		require.Positive(t, n, "ANVIL_E2E_RUNS")

		runs = n
	}

	var all [][]*result

	for run := 1; run <= runs; run++ {
		var results []*result

		ok := t.Run(fmt.Sprintf("run-%d", run), func(t labtest.T) {
			results = flowRun(t, b, run == 1)
		})

		all = append(all, results)

		if !ok {
			break
		}
	}

	writeReport(t, root, all)
}

// binaries are what every run uses, built once.
type binaries struct {
	provider, anvilctl, factory, diskInit string
	agent, standin                        string // asset directories
}

// flowRun is one run of the flow on a lab of its own; withDisk adds step 5.
func flowRun(t testing.TB, b binaries, withDisk bool) []*result {
	dir, prefix := labtest.NewLab(t, "anve", nil)

	firmware, nics, fullDHCP, ipv6 := labKinds(t)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix,
		Firmware: firmware, NICs: nics, FullDHCP: fullDHCP, IPv6Only: ipv6,
		ProviderBin: b.provider, AgentAssetsDir: b.agent,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort:    50042,
		FactoryBin: b.factory, FactoryAssetsDir: b.standin,
	}

	// 1. The provider, the site DHCP server and the factory, no machines yet: the
	// provider knows none.
	state, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(b.anvilctl, state.ControlSocket())

	out, err := ctl("get", "machines")
	require.NoError(t, err, out)
	require.Len(t, labtest.NonEmptyLines(out), 1, "the provider knows no machines yet:\n%s", out)

	// The consoles are followed from before power-on, so that their lines carry the
	// time they appeared (the stages' clock, with the provider's log).
	consoles := timeline.Follow(t.Context(), filepath.Join(dir, "machines", "*", "serial.log"), 50*time.Millisecond)

	// 2–4. The machines, one per kind, powered on together.
	cfg.Machines = len(firmware)
	state, err = lab.Up(t.Context(), cfg)
	poweredOn := time.Now()

	require.NoError(t, err)

	machines := state.MachineList()
	require.Len(t, machines, len(firmware))

	// 5 needs each machine's disk bootable: the disk system is built once here, and
	// written to a machine's disk once its stand-in reported the install (as Talos'
	// installer would have).
	methods := map[machine.Firmware]string{}
	if withDisk {
		methods = diskMethods()
	}

	diskInit := b.diskInit
	if _, err := os.Stat(diskInit); len(methods) > 0 && err != nil {
		require.NoError(t, diskimage.BuildInit(t.Context(), diskInit))
	}

	results := make([]*result, len(machines))

	var wg sync.WaitGroup

	for i, m := range machines {
		results[i] = &result{m: m}

		wg.Add(1)

		go func() {
			defer wg.Done()

			r := results[i]
			r.diskMethod = methods[m.Firmware]

			flow(t, ctl, m, poweredOn, filepath.Join(dir, "config-"+m.Name+".yaml"), r)
			r.stages(t, consoles, state.ProviderLog())

			// Off (its CPU is the other machines'), then, where step 5 needs it, the
			// installed system on its disk.
			assert.NoError(t, m.Stop(t.Context()), m.Name)

			if r.bootedOK && r.diskMethod != "" {
				opts, err := diskOptions(t, m, diskInit)
				if assert.NoError(t, err, m.Name) {
					assert.NoError(t, diskimage.Make(t.Context(), m.Disk(), opts), m.Name)
				}
			}
		}()
	}

	wg.Wait()

	// The metadata server refuses a machine's config to another machine's token (a row of
	// one machine has no other).
	for i, r := range results {
		other := results[(i+1)%len(results)]
		if other == r || r.token == "" || other.token == "" {
			continue
		}

		url := fmt.Sprintf("http://%s/metadata/%s?token=%s", net.JoinHostPort(state.AdvertiseAddr(), "50042"), r.m.UUID, other.token)
		code := httpStatusInNS(t, state.ProviderNS, url)
		assert.Equal(t, "403", code, "%s's config with %s's token", r.m.Name, other.m.Name)
	}

	// 5. An installed machine boots from its disk, by each method in turn (the method is
	// the provider's, global: the provider restarts with the next one).
	for _, r := range results {
		if !r.bootedOK || r.diskMethod == "" || t.Failed() {
			continue
		}

		cfg.ProviderArgs = []string{"--boot-from-disk-method", r.diskMethod}
		require.NoError(t, state.RestartProvider(t.Context(), cfg))

		m := r.m
		start := time.Now()

		require.NoError(t, m.Start(t.Context()))

		r.diskOK = assert.Eventually(t, func() bool {
			b, _ := os.ReadFile(m.SerialLog())

			return strings.Contains(string(b), diskimage.Line(m.Name))
		}, stepDeadline, 500*time.Millisecond, "%s (%s) did not boot from its disk by %s", m.Name, m.Firmware, r.diskMethod)
		r.diskBoot = time.Since(start)

		t.Logf("%s (%s): power-on → booted from disk by %s in %s", m.Name, m.Firmware, r.diskMethod, r.diskBoot.Round(100*time.Millisecond))

		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		assert.NoError(t, err, out)
		assert.Contains(t, out, "lastDecision: disk", m.Name)

		require.NoError(t, m.Stop(t.Context()))
	}

	return results
}

// diskOptions are the disk system of machine m: built from diskInit on amd64; on arm64
// the arm64 kernel, loader and disk system (built once, beside diskInit). It runs on a
// machine's goroutine: errors are returned.
func diskOptions(t testing.TB, m *machine.Machine, diskInit string) (diskimage.Options, error) {
	opts := diskimage.Options{Machine: m.Name, Init: diskInit, Format: diskimage.QCOW2, Size: 8 << 30}
	if m.Firmware != machine.ARM64 {
		return opts, nil
	}

	kernel, loader, err := lab.ARM64Boot(arm64KernelRoot(labtest.RepoRoot(t)))
	if err != nil {
		return opts, err
	}

	opts.Arch, opts.Kernel, opts.SystemdBootARM64 = "arm64", kernel, loader
	opts.Init = diskInit + "-arm64"

	arm64InitOnce.Do(func() { arm64InitErr = diskimage.BuildInitFor(t.Context(), opts.Init, "arm64") })

	return opts, arm64InitErr
}

var (
	arm64InitOnce sync.Once
	arm64InitErr  error
)

// flow takes one machine from power-on to "installed".
func flow(t testing.TB, ctl func(...string) (string, error), m *machine.Machine, poweredOn time.Time, configFile string, r *result) {
	// 2. It registers with its identity and inventory.
	var yaml string

	r.registeredOK = assert.Eventually(t, func() bool {
		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		yaml = out

		return err == nil && strings.Contains(yaml, "name: vda") && strings.Contains(yaml, m.Serial)
	}, stepDeadline, time.Second, "machine %s (%s) did not register with its inventory", m.Name, m.Firmware)
	if !r.registeredOK {
		return
	}

	r.registered = time.Since(poweredOn)
	t.Logf("%s (%s): power-on → registered %s", m.Name, m.Firmware, r.registered.Round(100*time.Millisecond))

	assert.Contains(t, yaml, "uuid: "+m.UUID, m.Name)
	assert.True(t, labtest.HasField(yaml, "mac", m.MAC), "%s: no mac: %s in\n%s", m.Name, m.MAC, yaml)
	assert.Contains(t, yaml, "firmware: "+firmwareName(m.Firmware), m.Name)
	assert.Contains(t, yaml, "manufacturer: "+m.Vendor.Manufacturer, m.Name)
	assert.Contains(t, yaml, "driver: virtio_net", m.Name)
	assert.Contains(t, yaml, "size: 8589934592", "%s: the 8 GiB disk", m.Name)

	// 3. Accept: the agent wipes the disk and reports it.
	out, err := ctl("machine", "accept", m.UUID)
	if !assert.NoError(t, err, out) {
		return
	}

	if !assert.Eventually(t, func() bool {
		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")
		yaml = out

		return err == nil && regexp.MustCompile(`(?s)lastWipe:.*device: vda.*verified:`).MatchString(yaml)
	}, stepDeadline, time.Second, "machine %s: no wipe of vda reported", m.Name) {
		return
	}

	if w := regexp.MustCompile(`method: (.+)`).FindStringSubmatch(yaml); w != nil {
		r.wipe = w[1]
	}

	// Allocate, with a config of its own.
	config := fmt.Sprintf("version: v1alpha1\nmachine:\n  type: worker\n  token: e2e-%s\n", m.Name)
	if !assert.NoError(t, os.WriteFile(configFile, []byte(config), 0o600)) {
		return
	}

	allocated := time.Now()
	r.allocated = allocated

	out, err = ctl("machine", "allocate", m.UUID, "--talos-version", talosVersion, "--extensions", extension, "--config", configFile)
	if !assert.NoError(t, err, out) {
		return
	}

	sm := schematicRe.FindStringSubmatch(out)
	if !assert.NotNil(t, sm, "no allocation and schematic in: %s", out) {
		return
	}

	r.allocation, r.schematic = sm[1], sm[2]

	// The provider registers the schematic with the factory in the background.
	registered := regexp.MustCompile(regexp.QuoteMeta(r.schematic) + `\s+\d+\s+true`)
	assert.Eventually(t, func() bool {
		out, err := ctl("get", "schematics")

		return err == nil && registered.MatchString(out)
	}, stepDeadline, time.Second, "the provider did not register schematic %s with the factory", r.schematic)

	// 4. The agent reboots the machine; the factory boots the stand-in Talos.
	var log string

	seen := func(s string) bool {
		b, _ := os.ReadFile(m.SerialLog())
		log = string(b)

		return strings.Contains(log, s)
	}

	if !assert.Eventually(t, func() bool { return seen(standin + " schematic=") }, stepDeadline, 500*time.Millisecond,
		"machine %s did not boot the stand-in Talos", m.Name) {
		return
	}

	r.kernel = time.Since(allocated)

	if !assert.Eventually(t, func() bool { return seen(standin + " installed") }, stepDeadline, 500*time.Millisecond,
		"machine %s: the stand-in did not report the install", m.Name) {
		return
	}

	r.bootedOK = true
	r.installed = time.Since(allocated)
	t.Logf("%s (%s): allocation → stand-in kernel running %s, installed %s", m.Name, m.Firmware,
		r.kernel.Round(100*time.Millisecond), r.installed.Round(100*time.Millisecond))

	sum := sha256.Sum256([]byte(config))
	assert.Contains(t, log, standin+" schematic="+r.schematic+" version="+talosVersion, m.Name)
	assert.Regexp(t, `talos\.events\.sink=(?:10\.77\.0\.1|\[fd77::1\]):50042`, log, m.Name)
	assert.Contains(t, log, fmt.Sprintf("%s config status=200 bytes=%d sha256=%s", standin, len(config), hex.EncodeToString(sum[:])), m.Name)
	assert.NotContains(t, log, "e2e-"+m.Name, "%s: the config is never printed", m.Name)

	if tm := tokenRe.FindStringSubmatch(log); assert.NotNil(t, tm, "%s: no talos.config= in the cmdline", m.Name) {
		assert.Equal(t, m.UUID, tm[1], m.Name)

		r.token = tm[2]
		assert.Contains(t, tokenPayload(tm[2]), r.allocation, "%s: the metadata token is bound to the allocation", m.Name)
	}

	// The provider recorded the install from the stand-in's events.
	assert.Eventually(t, func() bool {
		out, err := ctl("get", "machine", m.UUID, "-o", "yaml")

		return err == nil && regexp.MustCompile(`installedAllocation: "?`+regexp.QuoteMeta(r.allocation)).MatchString(out)
	}, stepDeadline, time.Second, "machine %s is not recorded as installed", m.Name)
}

// tokenPayload decodes the middle part of a v1.<payload>.<signature> token.
func tokenPayload(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return ""
	}

	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}

	return string(b)
}

func firmwareName(fw machine.Firmware) string {
	if fw == machine.BIOS {
		return "bios"
	}

	return "uefi"
}

// helperURL, when set, makes TestHTTPStatusHelper fetch it and print its status: the
// test binary runs itself as that helper inside a lab namespace (ip netns exec).
const helperURL = "ANVIL_E2E_HELPER_URL"

// TestHTTPStatusHelper is not a test: see httpStatusInNS.
func TestHTTPStatusHelper(t *testing.T) {
	url := os.Getenv(helperURL)
	if url == "" {
		t.Skip("a helper process of TestE2E")
	}

	client := &http.Client{Timeout: 10 * time.Second}

	resp, err := client.Get(url)
	require.NoError(t, err)

	resp.Body.Close()
	fmt.Printf("HTTP-STATUS=%d\n", resp.StatusCode)
}

// httpStatusInNS is the status of GET url from inside namespace ns, fetched by this test
// binary run there as TestHTTPStatusHelper.
func httpStatusInNS(t testing.TB, ns, url string) string {
	t.Helper()

	cmd := netns.Command(t.Context(), ns, os.Args[0], "-test.run=^TestHTTPStatusHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperURL+"="+url)

	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the helper in %s: %s", ns, out)

	m := regexp.MustCompile(`HTTP-STATUS=(\d+)`).FindSubmatch(out)
	require.NotNil(t, m, "the helper in %s: %s", ns, out)

	return string(m[1])
}

func writeReport(t testing.TB, root string, runs [][]*result) {
	if len(runs) == 0 || len(runs[0]) == 0 {
		return
	}

	var b strings.Builder

	fmt.Fprintf(&b, "Anvil e2e %s (TCG, %d CPUs, %d run(s); the disk step in the first)\n\n", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), len(runs))

	// The stages, median over the runs: seconds since power-on, since allocation.
	var names []string

	agent, talos := map[string]timeline.Stages{}, map[string]timeline.Stages{}
	agentRuns, talosRuns := map[string][]timeline.Stages{}, map[string][]timeline.Stages{}

	for _, results := range runs {
		for _, r := range results {
			name := r.m.Name + " (" + string(r.m.Firmware) + ")"
			if _, ok := agentRuns[name]; !ok {
				names = append(names, name)
			}

			agentRuns[name] = append(agentRuns[name], r.agent)
			talosRuns[name] = append(talosRuns[name], r.talos)
		}
	}

	for _, name := range names {
		agent[name], _ = timeline.Median(agentRuns[name])
		talos[name], _ = timeline.Median(talosRuns[name])
	}

	b.WriteString(timeline.Table(fmt.Sprintf("power-on → agent registered, seconds since power-on (median of %d)", len(runs)), names, agent, timeline.AgentStages))
	b.WriteString("\n")
	b.WriteString(timeline.Table(fmt.Sprintf("allocation → target kernel, seconds since allocation (median of %d)", len(runs)), names, talos, timeline.TalosStages))
	b.WriteString("\n")

	results := runs[0]

	fmt.Fprintf(&b, "run 1:\n%-12s %-9s %-21s %-22s %-21s %-28s %s\n", "machine", "firmware", "power-on→registered", "allocation→stand-in", "allocation→installed", "power-on→disk (method)", "wipe")

	sort.Slice(results, func(i, j int) bool { return results[i].m.Index < results[j].m.Index })

	for _, r := range results {
		d := func(ok bool, v time.Duration) string {
			if !ok {
				return "-"
			}

			return v.Round(100 * time.Millisecond).String()
		}

		disk := "not run"
		if r.diskMethod != "" {
			disk = d(r.diskOK, r.diskBoot) + " (" + r.diskMethod + ")"
		}

		fmt.Fprintf(&b, "%-12s %-9s %-21s %-22s %-21s %-28s %s\n", r.m.Name, r.m.Firmware, d(r.registeredOK, r.registered),
			d(r.bootedOK, r.kernel), d(r.bootedOK, r.installed), disk, r.wipe)
	}

	t.Logf("report:\n%s", b.String())

	out := filepath.Join(root, "_out", "e2e")
	if assert.NoError(t, os.MkdirAll(out, 0o755)) {
		assert.NoError(t, os.WriteFile(filepath.Join(out, "report.txt"), []byte(b.String()), 0o644))
	}
}

// standinAssets is the stand-in Talos' boot assets, built here (they are small and
// must match the stand-in's source); with arm64, its arm64 ones too.
func standinAssets(t testing.TB, root, bin string, arm64 bool) string {
	t.Helper()

	out := filepath.Join(bin, "talos-standin")
	require.NoError(t, lab.BuildStandinAssets(t.Context(), root, out))

	if arm64 {
		require.NoError(t, lab.BuildStandinAssetsARM64(t.Context(), root, arm64KernelRoot(root), out))
	}

	return out
}

// arm64KernelRoot is Debian's arm64 kernel tree make agent-arm64 unpacks.
func arm64KernelRoot(root string) string { return filepath.Join(root, "_out", "arm64", "root") }
