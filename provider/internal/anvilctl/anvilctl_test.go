package anvilctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v4"

	"github.com/anvil-metal/anvil/provider/internal/anvilctl"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

const (
	m1 = "4c4c4544-0000-1000-8000-000000000001"
	m2 = "4c4c4544-0000-1000-8000-000000000002"
)

type recorder struct{ st *resources.Store }

// RecordInstalled writes the status directly, as the provider's status controller would.
func (r recorder) RecordInstalled(ctx context.Context, machineID, allocationID, source string) error {
	s := resources.NewMachineStatus(machineID)
	s.TypedSpec().InstalledAllocation = allocationID
	s.TypedSpec().InstalledBy = source

	return r.st.Create(ctx, s)
}

// startServer runs a control server on a temporary socket over a state with two machines
// and a lease, and returns the endpoint.
func startServer(t *testing.T) string {
	t.Helper()

	endpoint, _ := startServerState(t)

	return endpoint
}

// startServerState is startServer that also returns the provider's state.
func startServerState(t *testing.T) (string, *resources.Store) {
	t.Helper()

	ctx := t.Context()

	st, err := resources.Open(ctx, t.TempDir())
	require.NoError(t, err)

	for i, id := range []string{m1, m2} {
		m := resources.NewMachine(id)
		m.TypedSpec().UUID = id
		m.TypedSpec().Arch = "amd64"
		m.TypedSpec().Firmware = []string{"uefi", "bios"}[i]
		m.TypedSpec().LastAddress = "10.5.0.1" + string(rune('0'+i))
		m.TypedSpec().LastDecision = "agent"
		m.TypedSpec().LastPXE = time.Now().Add(-time.Minute)
		require.NoError(t, st.Create(ctx, m))
	}

	lease := resources.NewDHCPLease("52:54:00:00:00:01")
	lease.TypedSpec().Address = "10.5.0.10"
	require.NoError(t, st.Create(ctx, lease))

	// A short path: Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "anvilctl")
	require.NoError(t, err)

	socket := filepath.Join(dir, "run", "control.sock")
	srv := control.New(st, transitions.New(st, transitions.Options{Recorder: recorder{st}}), control.Options{SocketPath: socket})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- srv.Run(ctx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		assert.NoFileExists(t, socket, "the socket is removed on stop")
		require.NoError(t, st.Close())
		require.NoError(t, os.RemoveAll(dir))
	})

	require.Eventually(t, func() bool {
		fi, err := os.Stat(socket)

		return err == nil && fi.Mode().Perm() == 0o600
	}, 5*time.Second, 10*time.Millisecond, "socket with mode 0600")

	return "unix://" + socket, st
}

func run(t *testing.T, endpoint string, args ...string) (stdout, stderr string, code int) {
	t.Helper()

	var out, errOut bytes.Buffer

	code = anvilctl.Main(t.Context(), append([]string{"--endpoint", endpoint}, args...), &out, &errOut)

	return out.String(), errOut.String(), code
}

func mustRun(t *testing.T, endpoint string, args ...string) string {
	t.Helper()

	out, errOut, code := run(t, endpoint, args...)
	require.Equal(t, 0, code, "anvilctl %v: %s", args, errOut)

	return out
}

func TestLifecycle(t *testing.T) {
	t.Parallel()

	ep := startServer(t)

	out := mustRun(t, ep, "get", "machines")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, []string{"ID", "ARCH", "FIRMWARE", "ADDRESS", "ACCEPTANCE", "ALLOCATION", "INSTALLED", "POWER", "IDENTITY", "LAST", "BOOT"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{m1, "amd64", "uefi", "10.5.0.10", "pending", "-", "-", "manual", "-", "agent"}, strings.Fields(lines[1])[:10])

	out = mustRun(t, ep, "machine", "accept", m1)
	assert.Contains(t, out, "machine "+m1+": accepted, not allocated")

	config := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte("version: v1alpha1\nmachine:\n  token: s3cret\n"), 0o600))

	out = mustRun(t, ep, "machine", "allocate", m1, "--talos-version", "v1.9.0",
		"--extensions", "siderolabs/intel-ucode,siderolabs/iscsi-tools", "--kernel-args", "console=ttyS0,115200n8 net.ifnames=0", "--config", config)
	assert.Contains(t, out, "allocated to Talos v1.9.0")

	out = mustRun(t, ep, "machine", "power", "on", m1)
	assert.Contains(t, out, "power on")

	out = mustRun(t, ep, "machine", "installed", m1)
	assert.Contains(t, out, "installed (allocation ")

	mustRun(t, ep, "machine", "cordon", m2)

	out = mustRun(t, ep, "get", "machines")
	assert.Regexp(t, m1+`\s+amd64\s+uefi\s+10.5.0.10\s+accepted\s+v1.9.0\s+yes\s+manual \(want on\)\s+-\s+agent 1m`, out)
	assert.Regexp(t, m2+`\s+amd64\s+bios\s+10.5.0.11\s+pending,cordoned\s+-\s+-\s+manual`, out)

	// A BMC, its password from a file; shown without it.
	pw := filepath.Join(t.TempDir(), "bmc-password")
	require.NoError(t, os.WriteFile(pw, []byte("bmc-s3cret\n"), 0o600))

	out = mustRun(t, ep, "machine", "bmc", "set", m1, "--kind", "ipmi", "--address", "10.5.0.200", "--username", "anvil", "--password-file", pw)
	assert.Contains(t, out, "ipmi://anvil@10.5.0.200")
	assert.NotContains(t, out, "s3cret")

	out = mustRun(t, ep, "get", "machines")
	assert.Regexp(t, m1+`\s+amd64\s+uefi\s+10.5.0.10\s+accepted\s+v1.9.0\s+yes\s+ipmi unknown \(want on\)`, out)

	out = mustRun(t, ep, "get", "bmc", m1, "-o", "yaml")
	assert.Contains(t, out, "address: 10.5.0.200")
	assert.Contains(t, out, "hasPassword: true")
	assert.NotContains(t, out, "s3cret")

	out = mustRun(t, ep, "machine", "wipe-mode", "zeroes", m1)
	assert.Contains(t, out, "wipe mode zeroes")

	_, errOut, code := run(t, ep, "machine", "wipe-mode", "shred", m1)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, `wipe mode "shred" is not one of fast, zeroes, secure-erase`)

	out = mustRun(t, ep, "machine", "reboot", m1)
	assert.Contains(t, out, "reboot requested")

	_, errOut, code = run(t, ep, "machine", "reboot", m2)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "only accepted machines")

	// YAML: the machine's three resources, the config redacted unless asked for.
	out = mustRun(t, ep, "get", "machine", m1, "-o", "yaml")
	assert.NotContains(t, out, "s3cret")

	var view struct {
		ID      string `yaml:"id"`
		Machine struct {
			Arch string `yaml:"arch"`
		} `yaml:"machine"`
		Intent struct {
			Acceptance string `yaml:"acceptance"`
			Allocation struct {
				TalosVersion string   `yaml:"talosVersion"`
				KernelArgs   []string `yaml:"kernelArgs"`
				Config       string   `yaml:"config"`
			} `yaml:"allocation"`
		} `yaml:"intent"`
		Status struct {
			InstalledBy string `yaml:"installedBy"`
		} `yaml:"status"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &view))
	assert.Equal(t, m1, view.ID)
	assert.Equal(t, "amd64", view.Machine.Arch)
	assert.Equal(t, "accepted", view.Intent.Acceptance)
	assert.Equal(t, []string{"console=ttyS0,115200n8", "net.ifnames=0"}, view.Intent.Allocation.KernelArgs)
	assert.Contains(t, view.Intent.Allocation.Config, "redacted")
	assert.Equal(t, transitions.InstalledByManual, view.Status.InstalledBy)

	assert.Contains(t, mustRun(t, ep, "get", "machine", m1, "-o", "yaml", "--show-config"), "s3cret")

	// JSON: a list of views with the YAML keys.
	var views []map[string]any
	require.NoError(t, json.Unmarshal([]byte(mustRun(t, ep, "get", "machines", "-o", "json")), &views))
	require.Len(t, views, 2)
	assert.Equal(t, m1, views[0]["id"])
	assert.Equal(t, "accepted", views[0]["intent"].(map[string]any)["acceptance"])

	// Deallocate owes a wipe; reject is now allowed.
	assert.Contains(t, mustRun(t, ep, "machine", "deallocate", m1), "not allocated")
	assert.Contains(t, mustRun(t, ep, "machine", "reject", m1), "rejected")
	assert.Contains(t, mustRun(t, ep, "machine", "uncordon", m2), m2+": pending")
}

func TestGenericGet(t *testing.T) {
	t.Parallel()

	ep := startServer(t)

	out := mustRun(t, ep, "get", "leases")
	assert.Regexp(t, `NAMESPACE\s+TYPE\s+ID\s+VERSION\s+ADDRESS\s+EXPIRES`, out)
	assert.Regexp(t, `metal\s+DHCPLeases.anvil.dev\s+52:54:00:00:00:01\s+1\s+10.5.0.10`, out)

	out = mustRun(t, ep, "get", "rd")
	assert.Regexp(t, `machineintents.anvil.dev\s+\d+\s+machineintent,machineintents,intent,intents`, out)

	out = mustRun(t, ep, "get", "Machines.anvil.dev", m1, "-o", "yaml")
	assert.Contains(t, out, "id: "+m1)
	assert.Contains(t, out, "arch: amd64")

	mustRun(t, ep, "machine", "accept", m1)
	mustRun(t, ep, "machine", "allocate", m1, "--talos-version", "1.9.0", "--config", "-")

	var in map[string]any
	out = mustRun(t, ep, "get", "intents", m1, "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &in))
	assert.Equal(t, "v1.9.0", in["spec"].(map[string]any)["allocation"].(map[string]any)["talosVersion"])

	_, errOut, code := run(t, ep, "get", "nosuchthing")
	assert.Equal(t, 1, code)
	assert.Equal(t, "anvilctl: resource type \"nosuchthing\" is not known (see 'anvilctl get rd')\n", errOut)
}

func TestErrors(t *testing.T) {
	t.Parallel()

	ep := startServer(t)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"machine", "accept", "x"}, `anvilctl: machine "x" is not known`},
		{[]string{"get", "machine", "x"}, `anvilctl: machine "x" is not known`},
		{[]string{"machine", "allocate", m1, "--talos-version", "v1.9.0"}, `anvilctl: machine "` + m1 + `" is pending: accept it before allocating it`},
		{[]string{"machine", "deallocate", m1}, `anvilctl: machine "` + m1 + `" is not allocated`},
		{[]string{"machine", "installed", m1}, `anvilctl: machine "` + m1 + `" is not allocated: there is no install to record`},
		{[]string{"machine", "power", "sideways", m1}, `anvilctl: power state "sideways" is not one of on, off, default`},
		{[]string{"get", "machines", "-o", "xml"}, `anvilctl: output "xml" is not one of table, wide, yaml, json`},
	} {
		out, errOut, code := run(t, ep, tc.args...)
		assert.Equal(t, 1, code, "%v", tc.args)
		assert.Empty(t, out, "%v", tc.args)
		assert.Equal(t, tc.want+"\n", errOut, "%v", tc.args)
	}

	// The state API is read-only.
	mustRun(t, ep, "machine", "accept", m1)
	_, errOut, code := run(t, ep, "machine", "allocate", m1, "--talos-version", "v1.7.0")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "v1.8.0 or later is required")
}

func TestEndpointFromEnv(t *testing.T) {
	ep := startServer(t)
	t.Setenv("ANVIL_ENDPOINT", ep)
	t.Setenv("ANVIL_OUTPUT", "json")

	var out, errOut bytes.Buffer
	code := anvilctl.Main(t.Context(), []string{"get", "machines"}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	assert.True(t, json.Valid(out.Bytes()), out.String())
}
