package boot_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

func TestNewAgentTalos(t *testing.T) {
	t.Parallel()

	site := []string{"console=ttyS0", "talos.dashboard.disabled=1"}

	at, err := boot.NewAgentTalos("v1.13.9", boot.DefaultAgentExtension, []string{"siderolabs/bnx2-bnx2x"}, site)
	require.NoError(t, err)

	assert.Equal(t, "v1.13.9", at.Version)
	assert.Equal(t, []string{"anvil-metal/metal-agent", "siderolabs/bnx2-bnx2x"}, at.Schematic.Customization.SystemExtensions.OfficialExtensions,
		"Anvil's agent extension first, then the site's")
	assert.Equal(t, site, at.Schematic.Customization.ExtraKernelArgs, "the site's Talos kernel arguments")

	id, err := at.Schematic.ID()
	require.NoError(t, err)
	assert.Equal(t, id, at.SchematicID)

	other, err := boot.NewAgentTalos("v1.13.9", boot.DefaultAgentExtension, nil, site)
	require.NoError(t, err)
	assert.NotEqual(t, at.SchematicID, other.SchematicID, "the extensions are the schematic's")

	for _, tc := range []struct {
		name, version, agent string
		extra, args          []string
		err                  string
	}{
		{name: "no v", version: "1.13.9", agent: boot.DefaultAgentExtension, err: "is not a Talos version"},
		{name: "not a version", version: "latest", agent: boot.DefaultAgentExtension, err: "is not a Talos version"},
		{name: "a line break", version: "v1.13.9\nchain http://evil", agent: boot.DefaultAgentExtension, err: "is not a Talos version"},
		{name: "before agent mode", version: "v1.8.4", agent: boot.DefaultAgentExtension, err: "has no agent mode: it came with Talos v1.9.0"},
		{name: "Sidero Labs' agent as ours", version: "v1.13.9", agent: boot.SideroAgentExtension, err: "does not speak to Anvil"},
		{name: "Sidero Labs' agent beside ours", version: "v1.13.9", agent: boot.DefaultAgentExtension, extra: []string{"siderolabs/metal-agent"}, err: "does not speak to Anvil"},
		{name: "twice", version: "v1.13.9", agent: boot.DefaultAgentExtension, extra: []string{"siderolabs/intel-ucode", "siderolabs/intel-ucode"}, err: "named twice"},
		{name: "ours twice", version: "v1.13.9", agent: boot.DefaultAgentExtension, extra: []string{boot.DefaultAgentExtension}, err: "named twice"},
		{name: "not a name", version: "v1.13.9", agent: boot.DefaultAgentExtension, extra: []string{"Intel UCode"}, err: "is not an extension name"},
		{name: "no agent name", version: "v1.13.9", agent: "", err: "is not an extension name"},
		{name: "a kernel arg of two words", version: "v1.13.9", agent: boot.DefaultAgentExtension, args: []string{"console=ttyS0 quiet"}, err: "not one word"},
	} {
		_, err := boot.NewAgentTalos(tc.version, tc.agent, tc.extra, tc.args)
		assert.ErrorContains(t, err, tc.err, tc.name)
	}
}

// agentTalosFixture is a provider's scripts booting the agent as Talos, with a cache over
// the Image Factory stand-in, which does not know the agent's schematic until the
// scripts register it.
func agentTalosFixture(t *testing.T, cache bool) (*boot.Scripts, *countingFactory) {
	t.Helper()

	assets := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		require.NoError(t, os.WriteFile(filepath.Join(assets, "kernel-"+arch), []byte("TALOS KERNEL "+arch), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(assets, "initramfs-"+arch+".xz"), []byte("TALOS INITRAMFS "+arch), 0o644))
	}

	f := &countingFactory{Factory: labfactory.New(labfactory.WithAssets(assets)), hits: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	// No agent assets at all: the agent is Talos.
	s := testScripts(t, false)
	s.TalosKernelArgs = []string{"console=ttyS0"}
	s.AgentKernelArgs = []string{"no_timer_check"}
	s.FactoryPXEBaseURL = srv.URL
	s.HTTPClient = srv.Client()

	at, err := boot.NewAgentTalos("v1.13.9", boot.DefaultAgentExtension, []string{"siderolabs/intel-ice-firmware"}, s.TalosKernelArgs)
	require.NoError(t, err)

	c, err := client.New(srv.URL)
	require.NoError(t, err)

	at.Register = func(ctx context.Context) error {
		_, _, err := c.SchematicCreate(ctx, at.Schematic)

		return err
	}
	s.AgentTalos = at

	if cache {
		ic, err := imagecache.New(imagecache.Options{Dir: t.TempDir(), FactoryBaseURL: srv.URL, Logger: zaptest.NewLogger(t)})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, ic.Close()) })

		s.Cache = ic
	}

	return s, f
}

// TestRenderAgentTalos: with --agent-talos-version the agent boots as the factory's Talos
// for the agent's schematic (registered on the first boot the factory did not know it
// for), from the provider's cache: the factory's cmdline, then the agent's arguments;
// the agent's token as for the initramfs; none of an allocation's Talos arguments.
func TestRenderAgentTalos(t *testing.T) {
	t.Parallel()

	for _, cached := range []bool{true, false} {
		name := map[bool]string{true: "from the cache", false: "from the factory's PXE endpoint"}[cached]

		t.Run(name, func(t *testing.T) {
			t.Parallel()

			s, f := agentTalosFixture(t, cached)
			id := s.AgentTalos.SchematicID
			issued := time.Unix(1700000000, 5)

			got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: issued})
			require.Equal(t, http.StatusOK, got.Status)
			assert.False(t, got.Handoff, "the agent, not a handoff to Talos")

			base := "http://10.77.0.1:50042/assets/talos/" + id + "/v1.13.9/"
			if !cached {
				base = s.FactoryPXEBaseURL + "/image/" + id + "/v1.13.9/"
			}

			url, args := kernelLine(t, got.Body)
			assert.Equal(t, base+"kernel-amd64", url)
			assert.Contains(t, got.Body, "\ninitrd "+base+"initramfs-amd64.xz\nboot\n")
			assert.Equal(t, "initrd=initramfs-amd64.xz", args[0])
			assert.Equal(t, "talos.platform=metal", args[1], "the factory's cmdline first")
			assert.Contains(t, args, "console=ttyS0", "the site's Talos kernel arguments, in the schematic")

			// The agent's arguments follow the factory's cmdline: the site's agent args,
			// then the provider, its CA, the machine and its token.
			tail := args[len(args)-5:]
			assert.Equal(t, []string{"no_timer_check", "anvil.provider=10.77.0.1:50042", "anvil.ca=abcd", "anvil.machine=m1"}, tail[:4])

			tok, ok := strings.CutPrefix(tail[4], "anvil.token=")
			require.True(t, ok, tail[4])

			claims, err := s.VerifyToken(tok)
			require.NoError(t, err)
			assert.Equal(t, token.KindAgent, claims.Kind)
			assert.Equal(t, "m1", claims.MachineID)
			assert.Equal(t, issued.UnixNano(), claims.Issued.UnixNano())
			assert.Equal(t, token.KindAgent, got.AgentToken.Kind, "the provider records the agent boot's token")

			for _, arg := range args {
				assert.False(t, strings.HasPrefix(arg, "talos.config=") || strings.HasPrefix(arg, "talos.events.sink="),
					"an allocation's boot arguments are not the agent's: %s", arg)
			}

			assert.NotContains(t, got.Body, "/assets/agent/")
			assert.True(t, s.IsAgentTalos(id, "v1.13.9"))
			assert.False(t, s.IsAgentTalos(id, "v1.13.8"))

			// The factory knows the schematic now, with Anvil's extension and the site's.
			doc, ok := f.Schematic(id)
			require.True(t, ok, "the agent's schematic was registered")
			assert.Contains(t, string(doc), "anvil-metal/metal-agent")
			assert.Contains(t, string(doc), "siderolabs/intel-ice-firmware")

			// Asked once unregistered (404), once registered; a second boot fetches nothing.
			file := "cmdline-metal-amd64"
			if cached {
				file = "kernel-amd64"
			}

			assert.Equal(t, 2, f.requests("/image/"+id+"/v1.13.9/"+file), file)

			s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: issued})
			assert.Equal(t, 2, f.requests("/image/"+id+"/v1.13.9/"+file), "%s: not fetched again", file)
		})
	}
}

// TestRenderAgentTalosInOmniMode: Omni's join arguments follow the factory's cmdline, as
// for the initramfs agent: agent-mode Talos joins Omni with them; until they are known,
// the agent waits.
func TestRenderAgentTalosInOmniMode(t *testing.T) {
	t.Parallel()

	s, _ := agentTalosFixture(t, true)

	known := false
	s.JoinArgs = func() ([]string, bool) {
		return []string{"siderolink.api=grpc://10.77.0.3:8090?jointoken=abc", "talos.events.sink=[fdae::1]:8091"}, known
	}

	got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{})
	assert.Contains(t, got.Body, "waiting for Omni's join config")
	assert.Contains(t, got.Body, "chain http://10.77.0.1:50042/ipxe/start.ipxe")
	assert.Empty(t, got.AgentToken.Kind, "no token for a boot that waits")

	known = true
	got = s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{})

	_, args := kernelLine(t, got.Body)
	join := slices.Index(args, "siderolink.api=grpc://10.77.0.3:8090?jointoken=abc")
	require.Positive(t, join, "%q", args)
	assert.Equal(t, "talos.events.sink=[fdae::1]:8091", args[join+1])
	assert.True(t, strings.HasPrefix(args[join+2], "anvil.provider="), "%q", args)

	// The schematic holds no join argument: they are each boot's.
	assert.NotContains(t, strings.Join(s.AgentTalos.Schematic.Customization.ExtraKernelArgs, " "), "siderolink")
}

// TestRenderAgentTalosNotReady: a factory that cannot be reached makes the agent boot
// wait and ask again, saying why.
func TestRenderAgentTalosNotReady(t *testing.T) {
	t.Parallel()

	s, _ := agentTalosFixture(t, false)
	s.FactoryPXEBaseURL = "http://127.0.0.1:1"
	s.AgentTalos.Register = nil

	got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{})
	require.Equal(t, http.StatusOK, got.Status)
	assert.Contains(t, got.Body, "echo Anvil: the agent's Talos boot assets are not ready (")
	assert.Contains(t, got.Body, "retrying in 10 s\nsleep 10\nchain http://10.77.0.1:50042/ipxe/start.ipxe\n")
	assert.NotContains(t, got.Body, "anvil.token=")
}

// TestAgentTalosUKI: a UEFI HTTP boot client (arm64) gets the agent's Talos as a UKI of
// the cached files, its .cmdline the factory's then the agent's arguments.
func TestAgentTalosUKI(t *testing.T) {
	t.Parallel()

	s, _ := agentTalosFixture(t, true)

	req := testReq
	req.Arch = "arm64"

	got := s.RenderUKI(t.Context(), req, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{})
	assert.Equal(t, http.StatusServiceUnavailable, got.Status, "no stub yet")
	assert.Contains(t, got.Message, "no UKI stub for arm64")

	writeARM64Assets(t, s, true)

	got = s.RenderUKI(t.Context(), req, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{})
	require.Equal(t, http.StatusOK, got.Status, got.Message)
	assert.Equal(t, lifecycle.BootAgent, got.Served)
	assert.True(t, strings.HasPrefix(got.Cmdline, "talos.platform=metal "), got.Cmdline)
	assert.Contains(t, got.Cmdline, " anvil.machine=m1 anvil.token=")
	assert.Equal(t, token.KindAgent, got.AgentToken.Kind)

	kernel, err := os.ReadFile(got.Kernel)
	require.NoError(t, err)
	assert.Equal(t, "TALOS KERNEL arm64", string(kernel), "the cached Talos kernel, not the agent's")
}
