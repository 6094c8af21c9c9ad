//go:build lab

package hostile

import (
	"context"
	"fmt"
	"net"
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

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// identityDeadline bounds a step of TestLabIdentity: a boot under TCG (power-on to the
// agent ~15–50 s), or an acceptance's wipe and the idle power-off after it.
const identityDeadline = 6 * time.Minute

var (
	// agentEKRe is the agent's console line naming the EK of the TPM it opened.
	agentEKRe = regexp.MustCompile(`TPM identity .*"ek": "(sha256:[0-9a-f]{64})"`)
	heldRe    = regexp.MustCompile(`(?m)^\s*held: (.+)$`)
)

// TestLabIdentity is a machine's TPM identity against an impostor. A lab machine with a
// TPM (swtpm, its state in the machine's directory) registers: its agent proves the TPM's
// EK, which the provider records and shows (anvilctl, label anvil.dev/identity=tpm). It
// is accepted, which binds that EK, and is power-cycled through its power owner: its
// agent, on the same TPM, is welcomed again. Then, the machine off, a second VM presents
// its SMBIOS UUID, serial and MAC with a TPM of its own (a fresh swtpm state): its agent
// is refused, the provider counts a security event of kind identity-mismatch and holds
// the machine, and the EK it showed is recorded nowhere.
func TestLabIdentity(tt *testing.T) {
	t := labtest.Recording(tt)

	labtest.RequireHost(t)

	if _, err := exec.LookPath(machine.SWTPM); err != nil {
		t.Skip("needs swtpm (make setup installs it)")
	}

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	providerBin, anvilctlBin, powerBin := filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl"), filepath.Join(bin, "lab-power")

	labtest.GoBuild(t, root, providerBin, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctlBin, "./provider/cmd/anvilctl")
	labtest.GoBuild(t, root, powerBin, "./hack/cmd/lab-power")

	dir, prefix := labtest.NewLab(t, "anvi", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: 1, DiskSize: "2G",
		Firmware: []machine.Firmware{machine.BIOS}, TPM: []bool{true}, BMC: []lab.PowerOwner{lab.OwnerAPI},
		ProviderBin: providerBin, AgentAssetsDir: labtest.AgentAssets(t, root, bin), PowerBin: powerBin,
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort: apiPort,
	}

	start := time.Now()
	step := func(what string, since time.Time) {
		t.Logf("%-64s %6.1fs (t=%.1fs)", what, time.Since(since).Seconds(), time.Since(start).Seconds())
	}

	st, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	m := st.MachineList()[0]
	require.True(t, m.TPM)
	require.NotZero(t, m.TPMPID(), "the machine's swtpm runs")

	ctl := labtest.Anvilctl(anvilctlBin, st.ControlSocket())
	yamlOf := func(kind string) string {
		out, _ := ctl("get", kind, m.UUID, "-o", "yaml")

		return out
	}

	// The metrics are read from another host on the provisioning network, as a
	// monitoring system would.
	a := attacker{ns: st.SiteNS, provider: labnet.ProviderAddr, api: net.JoinHostPort(labnet.ProviderAddr, strconv.Itoa(apiPort))}

	// 1. It registers with its TPM: the EK its agent opened is the one recorded and shown.
	t0 := time.Now()

	require.True(t, waitFor(t.T, identityDeadline, func() bool { return strings.Contains(yamlOf("machine"), "ek: sha256:") }),
		"the machine's EK is not recorded (its agent: %s)", agentEKs(t.T, m.SerialLog()))
	step("power-on → registered, EK recorded", t0)

	eks := agentEKs(t.T, m.SerialLog())
	require.Len(t, eks, 1, "one agent boot, one TPM identity on the console")

	ek := eks[0]
	machineYAML := yamlOf("machine")
	assert.True(t, labtest.HasField(machineYAML, "ek", ek), "anvilctl shows the EK the agent opened:\n%s", machineYAML)
	assert.True(t, labtest.HasField(machineYAML, "anvil.dev/identity", "tpm"), "labelled anvil.dev/identity=tpm:\n%s", machineYAML)

	out, err := ctl("get", "machines")
	t.Logf("anvilctl get machines:\n%s", out)
	require.NoError(t, err, out)

	// 2. Accepted, its EK bound; after its wipe the provider powers it off (idle).
	t0 = time.Now()

	out, err = ctl("machine", "accept", m.UUID)
	require.NoError(t, err, out)
	assert.Contains(t, yamlOf("intent"), ek, "acceptance binds the EK")

	require.True(t, waitFor(t.T, identityDeadline, func() bool { return !m.Running() }),
		"the provider did not power the accepted, idle machine off")
	step("accept → wiped, powered off by the provider (idle)", t0)
	assert.Zero(t, m.TPMPID(), "no swtpm runs for a machine that is off")

	// 3. Powered on again through its power owner: the same TPM, welcomed.
	t0 = time.Now()
	sessions := countLog(t.T, st.ProviderLog(), agentConnected(m.UUID))

	out, err = ctl("machine", "power", "on", m.UUID)
	require.NoError(t, err, out)
	require.True(t, waitLog(t.T, st.ProviderLog(), agentConnected(m.UUID), sessions+1, identityDeadline),
		"the machine's agent is not welcomed after its power cycle")
	step("power on → agent welcomed on the same TPM", t0)

	assert.Equal(t, []string{ek, ek}, agentEKs(t.T, m.SerialLog()), "the power cycle kept the TPM")
	assert.Zero(t, countLog(t.T, st.ProviderLog(), identityRefused(m.UUID)), "no identity refusal for the machine itself")
	assert.Empty(t, heldReason(yamlOf("intent")), "the machine is not held")

	// 4. The machine off, an impostor with its UUID, serial and MAC and a TPM of its own.
	t0 = time.Now()

	out, err = ctl("machine", "power", "off", m.UUID)
	require.NoError(t, err, out)
	require.True(t, waitFor(t.T, identityDeadline, func() bool { return !m.Running() }), "the machine does not power off")

	spec := st.Machines[0]
	spec.Dir = filepath.Join(dir, "machines", "impostor") // its disk, and a fresh TPM state
	impostor := machine.New(spec)
	require.Equal(t, m.UUID, impostor.UUID)
	require.Equal(t, m.MAC, impostor.MAC)

	welcomed := countLog(t.T, st.ProviderLog(), agentConnected(m.UUID))

	// Before the lab's teardown (cleanups run last first), which would sweep it too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		assert.NoError(t, impostor.Stop(ctx), "stopping the impostor")
	})

	require.NoError(t, impostor.Start(t.Context()))

	require.True(t, waitLog(t.T, st.ProviderLog(), identityRefused(m.UUID), 1, identityDeadline),
		"the provider did not refuse the impostor's agent (its console: %s)", agentEKs(t.T, impostor.SerialLog()))
	step("impostor power-on → its agent refused", t0)

	other := agentEKs(t.T, impostor.SerialLog())
	require.NotEmpty(t, other, "the impostor's agent opened its TPM")
	assert.NotEqual(t, ek, other[0], "the impostor's TPM is another TPM")

	require.True(t, waitFor(t.T, time.Minute, func() bool { return heldReason(yamlOf("intent")) != "" }), "the machine is not held:\n%s", yamlOf("intent"))
	t.Logf("held: %s", heldReason(yamlOf("intent")))

	events := securityEvents(t.T, a, "identity-mismatch")
	assert.GreaterOrEqual(t, events, 1.0, `anvil_security_events_total{kind="identity-mismatch"}`)
	t.Logf(`anvil_security_events_total{kind="identity-mismatch"} %v`, events)

	// The impostor's EK is named only as the evidence in why the machine is held.
	machineYAML = yamlOf("machine")
	assert.True(t, labtest.HasField(machineYAML, "ek", ek), "the recorded EK stays the machine's own:\n%s", machineYAML)
	assert.False(t, labtest.HasField(machineYAML, "ek", other[0]), "the impostor's EK is not recorded")
	assert.False(t, labtest.HasField(yamlOf("intent"), "boundEK", other[0]), "the impostor's EK is not bound")
	assert.Equal(t, welcomed, countLog(t.T, st.ProviderLog(), agentConnected(m.UUID)), "no session was welcomed for the impostor")

	for _, line := range matchingLines(t.T, st.ProviderLog(), identityRefused(m.UUID), 3) {
		t.Logf("provider: %s", line)
	}

	t.Logf("whole test %s after power-on", time.Since(start).Round(time.Second))
}

// agentEKs are the EKs the agents on a console opened, one per boot, in order.
func agentEKs(t *testing.T, serialLog string) []string {
	t.Helper()

	b, err := os.ReadFile(serialLog)
	if err != nil {
		return nil
	}

	var eks []string
	for _, m := range agentEKRe.FindAllStringSubmatch(string(b), -1) {
		eks = append(eks, m[1])
	}

	return eks
}

// identityRefused matches the provider's log line of an agent session refused for its
// TPM identity.
func identityRefused(id string) func(string) bool {
	return func(line string) bool {
		l := strings.ToLower(line)

		return strings.Contains(line, `"machine":"`+id+`"`) && strings.Contains(l, `"msg":"agent refused`) && strings.Contains(l, "identity")
	}
}

// heldReason is why an intent (anvilctl's YAML) holds its machine, "" when it does not.
func heldReason(intentYAML string) string {
	if m := heldRe.FindStringSubmatch(intentYAML); m != nil {
		return strings.TrimSpace(m[1])
	}

	return ""
}

// securityEvents reads anvil_security_events_total of kind from the provider's /metrics
// (0 when absent).
func securityEvents(t *testing.T, a attacker, kind string) float64 {
	t.Helper()

	c := a.httpClient()
	defer c.CloseIdleConnections()

	_, body, err := a.get(t.Context(), c, "/metrics")
	require.NoError(t, err)

	total := 0.0

	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, "anvil_security_events_total{") || !strings.Contains(line, fmt.Sprintf("kind=%q", kind)) {
			continue
		}

		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)

		total += f
	}

	return total
}

// matchingLines are up to n lines of path that match.
func matchingLines(t *testing.T, path string, match func(string) bool, n int) []string {
	t.Helper()

	b, err := os.ReadFile(path)
	require.NoError(t, err)

	var lines []string

	for line := range strings.SplitSeq(string(b), "\n") {
		if match(line) && len(lines) < n {
			lines = append(lines, line)
		}
	}

	return lines
}
