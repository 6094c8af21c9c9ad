package anvilctl_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
	"go.yaml.in/yaml/v4"

	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// ids are the machine IDs in the first column of a 'get machines' table.
func ids(table string) []string {
	var out []string

	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		out = append(out, strings.Fields(line)[0])
	}

	return out
}

func TestLabelsAndSelectors(t *testing.T) {
	t.Parallel()

	ep, st := startServerState(t)
	ctx := t.Context()

	// The provider's labels controller, as the provider runs it.
	rt, err := runtime.NewRuntime(st, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.NoError(t, rt.RegisterQController(&controllers.MachineLabelsController{Static: map[string]string{"dc": "lab"}}))

	rtCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	go func() { done <- rt.Run(rtCtx) }()

	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	inv := resources.NewMachineInventory(m1)
	*inv.TypedSpec() = resources.MachineInventorySpec{
		System:    resources.SystemInventory{Manufacturer: "Dell Inc.", Product: "PowerEdge R650", Serial: "7XQ1234"},
		CPUs:      []resources.CPUInventory{{Model: "Xeon Gold 6338", Manufacturer: "Intel(R) Corporation", Cores: 32, Threads: 64}},
		MemoryMiB: 64 * 1024,
		Disks:     []resources.DiskInventory{{Name: "nvme0n1", Size: 960e9, Transport: "nvme"}},
		NICs:      []resources.NICInventory{{Name: "ens1f0", MAC: "b8:ca:3a:00:00:01", SpeedMbps: 25000}},
		BMC:       &resources.BMCInventory{Address: "10.5.1.10"},
	}
	require.NoError(t, st.Create(ctx, inv))

	selected := func(selector string) []string {
		return ids(mustRun(t, ep, "get", "machines", "-l", selector))
	}

	require.Eventually(t, func() bool { return len(selected("anvil.dev/vendor=dell-inc")) == 1 }, 10*time.Second, 20*time.Millisecond)

	for _, tc := range []struct {
		selector string
		want     []string
	}{
		{"anvil.dev/vendor=dell-inc", []string{m1}},
		{"!anvil.dev/vendor", []string{m2}},
		{"dc=lab", []string{m1, m2}},
		{"dc", []string{m1, m2}},
		{"dc!=lab", nil},
		{"dc in (lab,nyc),anvil.dev/disk-type=nvme,anvil.dev/memory-class=64gib,anvil.dev/nic-speed=25g", []string{m1}},
		{"anvil.dev/arch notin (arm64)", []string{m1, m2}},
	} {
		assert.Equal(t, tc.want, selected(tc.selector), tc.selector)
	}

	// The user's own labels.
	assert.Equal(t, "machine "+m2+": labels rack=r7,team=storage\n", mustRun(t, ep, "machine", "label", m2, "team=storage", "rack=r7"))
	require.Eventually(t, func() bool { return len(selected("team=storage")) == 1 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, []string{m2}, selected("team=storage,dc=lab"))

	assert.Equal(t, "machine "+m2+": labels rack=r7\n", mustRun(t, ep, "machine", "label", m2, "--remove", "team"))
	require.Eventually(t, func() bool { return len(selected("team")) == 0 }, 10*time.Second, 20*time.Millisecond)

	var view struct {
		Labels map[string]string `yaml:"labels"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(mustRun(t, ep, "get", "machine", m2, "-o", "yaml")), &view))
	assert.Equal(t, map[string]string{"dc": "lab", "rack": "r7", "anvil.dev/arch": "amd64"}, view.Labels)

	// Any type's list filters on its own labels.
	assert.Contains(t, mustRun(t, ep, "get", "machinelabels", "-l", "rack=r7"), m2)
	assert.NotContains(t, mustRun(t, ep, "get", "machinelabels", "-l", "rack=r7"), m1)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"machine", "label", m2, "anvil.dev/vendor=x"}, "reserved prefix"},
		{[]string{"machine", "label", m2, "team"}, `label "team": want key=value`},
		{[]string{"machine", "label", m2}, "give labels to set"},
		{[]string{"machine", "label", m2, "team=a b"}, "label value"},
		{[]string{"get", "machines", "-l", "dc=a b"}, "label value"},
		{[]string{"get", "machine", m1, "-l", "dc"}, "give a type without an id"},
	} {
		_, errOut, code := run(t, ep, tc.args...)
		assert.Equal(t, 1, code, "%v", tc.args)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
	}

	// -o wide: what a person needs to decide, after the usual columns.
	lines := strings.Split(strings.TrimSpace(mustRun(t, ep, "get", "machines", "-o", "wide")), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, []string{"ID", "ARCH", "FIRMWARE", "ADDRESS", "ACCEPTANCE", "ALLOCATION", "INSTALLED", "POWER", "IDENTITY", "LAST", "BOOT",
		"VENDOR", "MODEL", "SERIAL", "CPU", "MEMORY", "DISKS", "MACS", "BMC", "EXTENSIONS", "KEXEC", "OWNER", "EK"}, strings.Fields(lines[0]))
	// The Xeon calls for the microcode extension (the extensions catalog). Its agent
	// reported an inventory and proved no TPM: identity none.
	assert.Regexp(t, m1+`\s+amd64\s+uefi\s+10.5.0.10\s+pending\s+-\s+-\s+manual\s+none\s+agent \S+ ago\s+Dell Inc.\s+PowerEdge R650\s+7XQ1234\s+1x Xeon Gold 6338, 32c/64t\s+64GiB\s+nvme0n1:960G\s+b8:ca:3a:00:00:01\s+10.5.1.10\s+intel-ucode\s+default\s+-\s+-$`, lines[1])
	assert.Regexp(t, m2+`\s+amd64\s+bios\s+10.5.0.11\s+pending\s+.*-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+default\s+-\s+-$`, lines[2])
}
