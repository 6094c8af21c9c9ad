package boot_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// writeARM64Assets adds an arm64 asset set to the scripts' directory, with a UKI stub or
// without, and reloads the assets.
func writeARM64Assets(t *testing.T, s *boot.Scripts, stub bool) {
	t.Helper()

	files := map[string]string{
		"vmlinuz-arm64":       "kernel",
		"initramfs-arm64.zst": "initramfs",
		"cmdline-arm64":       "console=ttyAMA0,115200n8\n",
	}
	if stub {
		files["uki-stub-arm64.efi"] = "MZ stub"
	}

	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(s.Assets.Dir, name), []byte(content), 0o644))
	}

	assets, err := boot.LoadAgentAssets(s.Assets.Dir)
	require.NoError(t, err)

	s.Assets = assets
}

var arm64Req = boot.Request{MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Arch: "arm64", Firmware: "uefi"}

// TestRenderUKI walks the boot decision's outcomes for a machine that boots a UKI.
func TestRenderUKI(t *testing.T) {
	t.Parallel()

	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: "s"}

	for _, tc := range []struct {
		name       string
		stub       bool
		join       func() ([]string, bool)
		decision   lifecycle.BootDecision
		wantStatus int
		wantServed lifecycle.Boot
		wantMsg    string
	}{
		{name: "agent", stub: true, decision: lifecycle.BootDecision{Boot: lifecycle.BootAgent}, wantStatus: http.StatusOK, wantServed: lifecycle.BootAgent},
		{name: "talos goes through the agent", stub: true, decision: lifecycle.BootDecision{Boot: lifecycle.BootTalos, Allocation: alloc}, wantStatus: http.StatusOK, wantServed: lifecycle.BootAgent},
		{name: "disk is a 404", stub: true, decision: lifecycle.BootDecision{Boot: lifecycle.BootDisk}, wantStatus: http.StatusNotFound, wantServed: lifecycle.BootDisk},
		{name: "no stub", decision: lifecycle.BootDecision{Boot: lifecycle.BootAgent}, wantStatus: http.StatusServiceUnavailable, wantMsg: "no UKI stub for arm64"},
		{name: "no join config yet", stub: true, join: func() ([]string, bool) { return nil, false }, decision: lifecycle.BootDecision{Boot: lifecycle.BootAgent}, wantStatus: http.StatusServiceUnavailable, wantMsg: "Omni's join config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s := testScripts(t, true)
			s.JoinArgs = tc.join
			s.AgentKernelArgs = []string{"no_timer_check"}
			writeARM64Assets(t, s, tc.stub)

			issued := time.Unix(1700000000, 7)
			got := s.RenderUKI(arm64Req, tc.decision, token.Claims{Issued: issued})

			require.Equal(t, tc.wantStatus, got.Status)
			assert.Equal(t, tc.wantServed, got.Served)
			assert.Contains(t, got.Message, tc.wantMsg)

			if tc.wantStatus != http.StatusOK {
				assert.Empty(t, got.Cmdline)
				assert.True(t, got.AgentToken.Issued.IsZero(), "no token for an image not served")

				return
			}

			assert.Equal(t, filepath.Join(s.Assets.Dir, "uki-stub-arm64.efi"), got.Stub)
			assert.Equal(t, filepath.Join(s.Assets.Dir, "vmlinuz-arm64"), got.Kernel)
			assert.Equal(t, filepath.Join(s.Assets.Dir, "initramfs-arm64.zst"), got.Initramfs)

			// The same arguments as the iPXE agent script's kernel line, with no initrd=
			// (the stub hands the kernel its .initrd).
			assert.True(t, strings.HasPrefix(got.Cmdline, "console=ttyAMA0,115200n8 no_timer_check anvil.provider=10.77.0.1:50042 anvil.ca=abcd anvil.machine=m1 anvil.token=v1."), got.Cmdline)
			assert.NotContains(t, got.Cmdline, "initrd=")

			tok := got.Cmdline[strings.Index(got.Cmdline, "anvil.token=")+len("anvil.token="):]
			claims, err := token.Verify(testKey, tok)
			require.NoError(t, err)
			assert.Equal(t, token.KindAgent, claims.Kind)
			assert.Equal(t, "m1", claims.MachineID)
			assert.Equal(t, claims, got.AgentToken)
		})
	}
}
