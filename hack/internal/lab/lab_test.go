package lab_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/proc"
)

// TestDownSweepsWithoutState: a lab whose state file is lost (a crash, a wiped
// directory) is still brought down, by its namespaces and its directory.
func TestDownSweepsWithoutState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the lab needs root")
	}

	for _, tool := range []string{"ip", "dnsmasq", "qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}

	_, file, _, _ := runtime.Caller(0)
	provider := filepath.Join(t.TempDir(), "provider")

	build := exec.Command("go", "build", "-o", provider, "./provider/cmd/provider")
	build.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..")

	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	dir := filepath.Join(t.TempDir(), "lab")
	prefix := fmt.Sprintf("anvd%d", os.Getpid()%100000)
	ctx := context.Background()

	t.Cleanup(func() { _ = lab.Down(ctx, dir, prefix) }) // whatever the assertions left

	s, err := lab.Up(ctx, lab.Config{
		Dir: dir, Prefix: prefix, Machines: 1, Firmware: []machine.Firmware{machine.BIOS},
		ProviderBin: provider, AgentAssetsDir: t.TempDir(), APIPort: 50042,
		FactoryURL: "http://10.77.0.1:8080", FactoryPXEURL: "http://10.77.0.1:8080",
	})
	require.NoError(t, err)

	require.True(t, proc.Alive(s.ProviderPID))
	require.True(t, proc.Alive(s.DHCPPID))
	require.True(t, s.MachineList()[0].Running())
	require.Len(t, proc.FindByArg(dir+"/"), 3, "provider, dnsmasq, qemu")

	// Up again keeps what runs.
	again, err := lab.Up(ctx, lab.Config{Dir: dir, Prefix: prefix, Machines: 1})
	require.NoError(t, err)
	assert.Equal(t, s.ProviderPID, again.ProviderPID)

	require.NoError(t, os.Remove(lab.StateFile(dir)))
	require.NoError(t, lab.Down(ctx, dir, prefix))

	assert.Empty(t, proc.FindByArg(dir+"/"))

	namespaces, err := labnet.ListNamespaces(ctx)
	require.NoError(t, err)

	for _, ns := range namespaces {
		assert.False(t, strings.HasPrefix(ns, prefix+"-"), ns)
	}

	require.NoError(t, lab.Down(ctx, dir, prefix), "down is idempotent")
}
