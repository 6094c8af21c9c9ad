//go:build lab

// Package hostile is the black-box hostile-client suite: a lab provider (standalone, in
// the lab's namespace) is attacked from another host on its provisioning network with
// garbage and oversize datagrams, held connections, invalid and replayed tokens and path
// traversal, while a real lab machine PXE-boots and registers. Each attack must meet a
// clear refusal, change nothing in the provider's state and leave no secret in its log.
package hostile

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/proc"
)

const (
	apiPort = 50042
	// Bounds of the attack: each load loop is bounded in count, the whole in time.
	datagramsPerPort = 1500
	invalidTokens    = 1500
	replays          = 200
	attackDeadline   = 3 * time.Minute
	// bootDeadline is generous: under TCG power-on to the agent is ~15–50 s, and the
	// attack shares the two cores.
	bootDeadline = 4 * time.Minute
)

var (
	cmdlineTokenRe = regexp.MustCompile(`Command line: .*anvil\.token=(\S+)`)
	// anyTokenRe is an Anvil token's shape (v1.<claims>.<mac>), in a log.
	anyTokenRe = regexp.MustCompile(`v1\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{40,}`)
)

// TestLabHostile: see the package comment.
func TestLabHostile(t *testing.T) {
	labtest.RequireHost(t)

	root := labtest.RepoRoot(t)
	bin := t.TempDir()
	providerBin, anvilctlBin := filepath.Join(bin, "provider"), filepath.Join(bin, "anvilctl")

	labtest.GoBuild(t, root, providerBin, "./provider/cmd/provider")
	labtest.GoBuild(t, root, anvilctlBin, "./provider/cmd/anvilctl")

	assets := privateAssets(t, labtest.AgentAssets(t, root, bin))
	dir, prefix := labtest.NewLab(t, "anvh", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Firmware: []machine.Firmware{machine.BIOS},
		ProviderBin: providerBin, AgentAssetsDir: assets, APIPort: apiPort,
		// No factory runs there: the Talos asset routes are attacked, never served.
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
	}

	// The provider and the site DHCP server, no machine yet.
	st, err := lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	ctl := labtest.Anvilctl(anvilctlBin, st.ControlSocket())
	require.Empty(t, machineIDs(t, ctl), "the provider knows no machine yet")

	// Symlinks out of the TFTP root, as an operator's mistake or a writable root makes.
	tftpRoot := filepath.Join(dir, "tftp")
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(tftpRoot, "escape-file")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(tftpRoot, "escape-dir")))

	a := attacker{ns: st.SiteNS, provider: labnet.ProviderAddr, api: net.JoinHostPort(labnet.ProviderAddr, strconv.Itoa(apiPort))}

	// The real machine powers on; the attack starts with it.
	cfg.Machines = 1
	st, err = lab.Up(t.Context(), cfg)
	require.NoError(t, err)

	m := st.MachineList()[0]
	start := time.Now()

	actx, cancel := context.WithTimeout(t.Context(), attackDeadline)
	defer cancel()

	attacks := map[string]func(ctx context.Context, t *testing.T){
		"datagrams":  func(ctx context.Context, t *testing.T) { attackDatagrams(ctx, t, a, datagramsPerPort) },
		"tftp-paths": func(ctx context.Context, t *testing.T) { attackTFTPPaths(ctx, t, a) },
		"held":       func(ctx context.Context, t *testing.T) { attackHeldConnections(ctx, t, a) },
		"http-paths": func(ctx context.Context, t *testing.T) { attackHTTPPaths(ctx, t, a); headerFlood(ctx, t, a) },
		"tokens":     func(ctx context.Context, t *testing.T) { attackTokens(ctx, t, a, m.UUID, invalidTokens) },
	}

	var wg sync.WaitGroup

	for name, attack := range attacks {
		wg.Add(1)

		go func() {
			defer wg.Done()

			began := time.Now()

			attack(actx, t)
			t.Logf("attack %s done in %s", name, time.Since(began).Round(time.Second))
		}()
	}

	// Meanwhile the real machine PXE-boots and registers.
	registered := waitLog(t, st.ProviderLog(), agentConnected(m.UUID), 1, bootDeadline)
	t.Logf("machine %s (%s) registered %s after power-on, under attack", m.Name, m.UUID, time.Since(start).Round(time.Second))

	wg.Wait()
	cancel()

	require.True(t, registered, "the real machine registers while the attack runs")
	assert.Equal(t, []string{m.UUID}, machineIDs(t, ctl), "the attack made no machine known: only the real one is")
	assert.True(t, proc.Alive(st.ProviderPID), "the provider survived the attack")

	t.Run("replayed token", func(t *testing.T) { replay(t, a, st, m, ctl) })

	checkLog(t, st.ProviderLog())
	t.Logf("refusals the provider counted:\n%s", refusalMetrics(t, a))

	// Last, as it changes the machine's state: the limit SECURITY.md states, measured.
	t.Run("known limit: boot scripts for anyone", func(t *testing.T) { mintedToken(t, a, m) })
	t.Logf("whole test %s after power-on", time.Since(start).Round(time.Second))
}

// replay: a rogue "agent" presents the token it read from the machine's first boot (in
// the lab from the serial console, which shows the same cmdline the plain-HTTP boot
// script carried) after the machine has booted again.
func replay(t *testing.T, a attacker, st *lab.State, m *machine.Machine, ctl func(...string) (string, error)) {
	first := cmdlineTokens(t, m.SerialLog())
	require.NotEmpty(t, first, "the first boot's token on the console")

	sniffed := first[0]
	scripts := metric(t, a, agentScripts)

	// The machine has booted again once the provider served it a new agent boot script:
	// that supersedes the sniffed token. Its new agent (slow under TCG) is not waited for.
	require.NoError(t, m.Reset(t.Context()))
	require.True(t, waitFor(t, bootDeadline, func() bool { return metric(t, a, agentScripts) > scripts }),
		"the machine fetches a new boot script after its reset")

	sessions := countLog(t, st.ProviderLog(), agentConnected(m.UUID))

	before, err := ctl("get", "machines", "-o", "yaml")
	require.NoError(t, err, before)

	conn, err := a.agentConn()
	require.NoError(t, err)

	defer conn.Close()

	refusedAs(t, hello(t.Context(), conn, m.UUID, sniffed), codes.Unauthenticated, "superseded", "the replayed token of the previous boot")
	refusedAs(t, hello(t.Context(), conn, "00000000-0000-0000-0000-000000000001", sniffed), codes.Unauthenticated, "invalid token",
		"the sniffed token for another machine")

	var refused tally

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	parallel(ctx, replays, 4, func(int) { refused.add(status.Code(hello(ctx, conn, m.UUID, sniffed)).String()) })
	assertAllRefused(t, &refused, replays, "replays of a superseded token")

	after, err := ctl("get", "machines", "-o", "yaml")
	require.NoError(t, err, after)

	// The real agent's new session, should it come meanwhile, changes the machine.
	if countLog(t, st.ProviderLog(), agentConnected(m.UUID)) == sessions {
		assert.Equal(t, before, after, "the replays changed nothing in the machine's state")
	} else {
		t.Log("the machine's new agent connected during the replays: its state is not compared")
	}

	t.Logf("replay: %d+2 hellos with the sniffed token refused after the machine's new boot script", replays)
}

// agentScripts counts the agent boot scripts the provider served.
const agentScripts = `anvil_boot_scripts_total{decision="agent"}`

// metric reads one sample of the provider's /metrics (0 when absent).
func metric(t *testing.T, a attacker, sample string) float64 {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	c := a.httpClient()
	defer c.CloseIdleConnections()

	_, body, err := a.get(ctx, c, "/metrics")
	if !assert.NoError(t, err) {
		return 0
	}

	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			assert.NoError(t, err, line)

			return f
		}
	}

	return 0
}

// waitFor polls cond every second until it holds or the deadline passes.
func waitFor(t *testing.T, deadline time.Duration, cond func() bool) bool {
	end := time.Now().Add(deadline)

	for time.Now().Before(end) && t.Context().Err() == nil {
		if cond() {
			return true
		}

		time.Sleep(time.Second)
	}

	return false
}

// mintedToken measures the limit SECURITY.md names first: the boot script is served to
// any client, with a valid token for the UUID it claims. It reports, and fails only if
// the probe itself cannot run: a fix (tokens a third host cannot get) turns the report.
func mintedToken(t *testing.T, a attacker, m *machine.Machine) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	c := a.httpClient()
	defer c.CloseIdleConnections()

	status, body, err := a.get(ctx, c, "/ipxe/boot.ipxe?uuid="+m.UUID+"&mac="+m.MAC+"&arch=i386&platform=pcbios")
	require.NoError(t, err)

	tok := regexp.MustCompile(`anvil\.token=(\S+)`).FindStringSubmatch(body)
	if tok == nil {
		t.Logf("a boot script fetched by another host for %s (status %d) carries no agent token", m.UUID, status)

		return
	}

	conn, err := a.agentConn()
	require.NoError(t, err)

	defer conn.Close()

	err = hello(ctx, conn, m.UUID, tok[1])
	t.Logf("KNOWN LIMIT (SECURITY.md): a boot script fetched from %s for machine %s carries a token the agent API welcomes: %v (hello: %v)",
		a.ns, m.UUID, err == nil, err)
}

// privateAssets copies the agent's boot assets into a directory of the test's own, with a
// symlink to /etc/passwd beside them (the shared _out/agent stays untouched).
func privateAssets(t *testing.T, src string) string {
	t.Helper()

	dst := filepath.Join(t.TempDir(), "agent")
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dst, "escape-file")))

	return dst
}

// machineIDs lists the machines the provider knows.
func machineIDs(t *testing.T, ctl func(...string) (string, error)) []string {
	t.Helper()

	out, err := ctl("get", "machines")
	require.NoError(t, err, out)

	var ids []string

	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			ids = append(ids, f[0])
		}
	}

	slices.Sort(ids)

	return ids
}

// agentConnected matches the provider's log line of an agent session welcomed.
func agentConnected(id string) func(string) bool {
	return func(line string) bool {
		return strings.Contains(line, `"msg":"agent connected"`) && strings.Contains(line, `"machine":"`+id+`"`)
	}
}

func countLog(t *testing.T, path string, match func(string) bool) int {
	t.Helper()

	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}

	n := 0

	for line := range strings.SplitSeq(string(b), "\n") {
		if match(line) {
			n++
		}
	}

	return n
}

// waitLog waits until path has n lines that match, or the deadline passes.
func waitLog(t *testing.T, path string, match func(string) bool, n int, deadline time.Duration) bool {
	t.Helper()

	return waitFor(t, deadline, func() bool { return countLog(t, path, match) >= n })
}

// cmdlineTokens are the agent tokens on the kernel command lines of a console, in order.
func cmdlineTokens(t *testing.T, serialLog string) []string {
	t.Helper()

	b, err := os.ReadFile(serialLog)
	require.NoError(t, err)

	var out []string
	for _, m := range cmdlineTokenRe.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}

	return out
}

// checkLog: the provider's log names no token (a sniffed or replayed one, or any in a
// token's shape) and no BMC password.
func checkLog(t *testing.T, path string) {
	t.Helper()

	b, err := os.ReadFile(path)
	require.NoError(t, err)

	assert.Empty(t, anyTokenRe.FindAllString(string(b), 5), "the provider's log holds no token")
	assert.NotContains(t, string(b), "anvil.token=", "the provider's log holds no boot cmdline's token")
	t.Logf("provider log: %d lines, no token in it", strings.Count(string(b), "\n"))
}

// refusalMetrics reads the provider's refusal counters from /metrics.
func refusalMetrics(t *testing.T, a attacker) string {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	c := a.httpClient()
	defer c.CloseIdleConnections()

	_, body, err := a.get(ctx, c, "/metrics")
	if !assert.NoError(t, err) {
		return ""
	}

	var lines []string

	for line := range strings.SplitSeq(body, "\n") {
		for _, name := range []string{
			"anvil_agent_sessions_refused_total", "anvil_agent_sessions_total", "anvil_boot_script_bad_requests_total",
			"anvil_metadata_requests_total", "anvil_event_sink_events_total", "anvil_pxe_dhcp_malformed_total",
			"anvil_pxe_dhcp_received_total", "anvil_pxe_tftp_errors_total",
		} {
			if strings.HasPrefix(line, name) {
				lines = append(lines, "  "+line)
			}
		}
	}

	return strings.Join(lines, "\n")
}
