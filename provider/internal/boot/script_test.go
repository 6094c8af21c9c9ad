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

// testKey is the tests' token key: tokens are checked with it by token.Sign and
// token.Verify, apart from the Scripts' Signer.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// testEarlyConfig stands for the provider's CA on the kernel line: the boot package passes
// it on as it is.
const testEarlyConfig = "KLUv/the-provider-CA"

func testScripts(t *testing.T, withAssets bool) *boot.Scripts {
	t.Helper()

	dir := t.TempDir()

	if withAssets {
		for name, content := range map[string]string{
			"vmlinuz-amd64":      "kernel",
			"initramfs-amd64.xz": "initramfs",
			"cmdline-amd64":      "console=ttyS0\n  quiet\n",
		} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
	}

	assets, err := boot.LoadAgentAssets(dir)
	require.NoError(t, err)

	return &boot.Scripts{
		BaseURL:           "http://10.77.0.1:50042",
		TLSBaseURL:        "https://10.77.0.1:50042",
		EarlyConfig:       testEarlyConfig,
		APIEndpoint:       "10.77.0.1:50042",
		CAFingerprint:     "abcd",
		FactoryPXEBaseURL: "http://factory.lab:8080",
		Platform:          "metal",
		DiskMethod:        boot.DiskIPXEExit,
		Assets:            assets,
		Tokens:            token.NewSigner(testKey),
	}
}

var testReq = boot.Request{MachineID: "m1", UUID: "m1", MAC: "52:54:00:00:00:01", Arch: "amd64", Firmware: "bios"}

func TestRenderAgent(t *testing.T) {
	t.Parallel()

	s := testScripts(t, true)
	issued := time.Unix(1700000000, 5)

	got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: issued})
	require.Equal(t, http.StatusOK, got.Status)
	assert.Contains(t, got.Body, "kernel http://10.77.0.1:50042/assets/agent/vmlinuz-amd64 initrd=initramfs-amd64.xz console=ttyS0 quiet anvil.provider=10.77.0.1:50042 anvil.ca=abcd anvil.machine=m1 anvil.token=v1.")
	assert.Contains(t, got.Body, "\ninitrd http://10.77.0.1:50042/assets/agent/initramfs-amd64.xz\nboot\n")

	tok := got.Body[strings.Index(got.Body, "anvil.token=")+len("anvil.token="):]
	tok = tok[:strings.IndexByte(tok, '\n')]
	claims, err := token.Verify(testKey, tok)
	require.NoError(t, err)
	assert.Equal(t, token.KindAgent, claims.Kind)
	assert.Equal(t, "m1", claims.MachineID)
	assert.True(t, claims.Issued.Equal(issued))
	assert.Equal(t, claims, got.AgentToken)

	_, ok := s.Assets.For("arm64")
	assert.False(t, ok)
	assert.True(t, s.Assets.Has("vmlinuz-amd64"))
	assert.False(t, s.Assets.Has("cmdline-amd64"))
}

func TestRenderAgentKernelArgs(t *testing.T) {
	t.Parallel()

	s := testScripts(t, true)
	s.AgentKernelArgs = []string{"no_timer_check", "console=ttyS1,115200"}

	got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: time.Unix(1700000000, 0)})
	assert.Contains(t, got.Body, "initrd=initramfs-amd64.xz console=ttyS0 quiet no_timer_check console=ttyS1,115200 anvil.provider=",
		"after the assets' own cmdline, before the agent's parameters")
}

func TestRenderAgentWithoutAssets(t *testing.T) {
	t.Parallel()

	got := testScripts(t, false).Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: time.Now()})
	assert.Equal(t, http.StatusOK, got.Status)
	assert.Contains(t, got.Body, "no agent boot assets for amd64")
	assert.Contains(t, got.Body, "chain http://10.77.0.1:50042/ipxe/start.ipxe")
	assert.NotContains(t, got.Body, "anvil.token")
}

// TestScriptsTokens: Scripts with a Signer and Scripts with only the key sign the same
// tokens and verify each other's, and neither verifies a token of another key.
func TestScriptsTokens(t *testing.T) {
	t.Parallel()

	signer := testScripts(t, true)
	_, id := factoryFor(t, signer)
	keyed := testScripts(t, true)
	keyed.Tokens, keyed.TokenKey = nil, testKey
	keyed.FactoryPXEBaseURL = signer.FactoryPXEBaseURL
	alloc := &resources.Allocation{ID: "a1", TalosVersion: "v1.9.0", SchematicID: id}
	claims := token.Claims{Issued: time.Unix(1700000000, 5)}

	for _, d := range []lifecycle.BootDecision{{Boot: lifecycle.BootAgent}, {Boot: lifecycle.BootTalos, Allocation: alloc}} {
		want := keyed.Render(t.Context(), testReq, d, claims)

		for range 2 {
			assert.Equal(t, want, signer.Render(t.Context(), testReq, d, claims), d.Boot)
		}

		assert.Contains(t, want.Body, "kernel ", "%s: a boot, not a retry: %s", d.Boot, want.Body)
	}

	for name, tc := range map[string]struct {
		tok   string
		valid bool
	}{
		"by the signer":  {signer.Tokens.Sign(boot.MetadataClaims("m1", "a1")), true},
		"by the key":     {token.Sign(testKey, boot.MetadataClaims("m1", "a1")), true},
		"by another key": {token.Sign([]byte("another key another key another!"), boot.MetadataClaims("m1", "a1")), false},
		"not a token":    {"v1.x.y", false},
	} {
		for _, s := range []*boot.Scripts{signer, keyed} {
			got, err := s.VerifyToken(tc.tok)
			if !tc.valid {
				require.ErrorIs(t, err, token.ErrInvalid, name)

				continue
			}

			require.NoError(t, err, name)
			assert.Equal(t, boot.MetadataClaims("m1", "a1"), got, name)
		}
	}
}

func TestRenderDisk(t *testing.T) {
	t.Parallel()

	for method, want := range map[boot.DiskMethod]struct {
		status int
		body   string
	}{
		boot.DiskIPXEExit:    {http.StatusOK, "\nexit 1\n"},
		boot.DiskIPXESanboot: {http.StatusOK, "sanboot --no-describe --drive 0x80 || exit 1\n"},
		boot.DiskHTTP404:     {http.StatusNotFound, "boot from disk"},
	} {
		s := testScripts(t, true)
		s.DiskMethod = method

		got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootDisk}, token.Claims{})
		assert.Equal(t, want.status, got.Status, method)
		assert.Contains(t, got.Body, want.body, method)
	}

	_, err := boot.ParseDiskMethod("pxe")
	assert.ErrorContains(t, err, "unknown boot-from-disk method")
}

// TestSchematic: a schematic carries what every boot of its Talos gets, installed ones
// included — the site's args, the allocation's, then in Omni mode Omni's join args — and
// never one boot's own: no metadata URL (with its token), no provider event sink.
func TestSchematic(t *testing.T) {
	t.Parallel()

	join := []string{"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3Ax", "talos.events.sink=[fdae:41e4:649b:9303::1]:8091",
		"talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092"}

	for _, tc := range []struct {
		name       string
		site, user []string
		join       []string // nil: standalone
		want       []string
	}{
		{name: "standalone, nothing", want: []string{}},
		{name: "standalone, the user's", user: []string{"console=ttyS0"}, want: []string{"console=ttyS0"}},
		{
			// The site's come first, so that an allocation's own win where the kernel
			// takes the last.
			name: "standalone, the site's then the user's",
			site: []string{"console=ttyS1,115200", "talos.dashboard.disabled=1"}, user: []string{"console=ttyS0"},
			want: []string{"console=ttyS1,115200", "talos.dashboard.disabled=1", "console=ttyS0"},
		},
		{name: "Omni, the join args", join: join, want: join},
		{
			name: "Omni, the site's, the user's, then the join args",
			site: []string{"console=ttyS1,115200"}, user: []string{"console=ttyS0"}, join: join,
			want: append([]string{"console=ttyS1,115200", "console=ttyS0"}, join...),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s := testScripts(t, true)
			s.TalosKernelArgs = tc.site

			if tc.join != nil {
				s.JoinArgs = func() ([]string, bool) { return tc.join, true }
			}

			sc, err := s.Schematic([]string{"siderolabs/intel-ucode"}, tc.user)
			require.NoError(t, err)
			assert.Equal(t, []string{"siderolabs/intel-ucode"}, sc.Customization.SystemExtensions.OfficialExtensions)
			assert.Equal(t, tc.want, sc.Customization.ExtraKernelArgs)

			for _, arg := range sc.Customization.ExtraKernelArgs {
				assert.NotContains(t, arg, "talos.config", "an installed Talos would fetch its config from it for ever")
				assert.NotContains(t, arg, "${")
				assert.NotEqual(t, "talos.events.sink="+s.APIEndpoint, arg, "the provider's sink is one boot's")
			}

			id, err := sc.ID()
			require.NoError(t, err)
			assert.Len(t, id, 64)
		})
	}
}

// TestSchematicInOmniMode: before the adapter has said Omni's join args there is no
// schematic, nor with one a kernel line cannot carry.
func TestSchematicInOmniMode(t *testing.T) {
	t.Parallel()

	s := testScripts(t, true)

	var join []string

	s.JoinArgs = func() ([]string, bool) { return join, join != nil }

	_, err := s.Schematic(nil, []string{"console=ttyS0"})
	require.ErrorContains(t, err, "join config is not known yet")

	join = []string{"a=1 chain http://evil"}

	_, err = s.Schematic(nil, nil)
	require.ErrorContains(t, err, "cannot carry")
}

// TestStartScript: the start script hands the machine back to the firmware whenever the
// boot script does not boot something (boot-from-disk by exit or 404, provider down),
// rather than looping, and with a failure status, so that UEFI firmware goes on to its
// next boot option instead of its setup UI.
func TestStartScript(t *testing.T) {
	t.Parallel()

	got := testScripts(t, false).StartScript()
	assert.Equal(t, "#!ipxe\n"+
		"chain http://10.77.0.1:50042/ipxe/boot.ipxe?uuid=${uuid}&mac=${netX/mac:hexhyp}&arch=${buildarch}&platform=${platform} || exit 1\n"+
		"exit 1\n", got)
}

// TestAgentScriptJoinsOmni: in Omni mode the agent's kernel line carries Omni's join
// args; until they are known, or if they could break the script, iPXE retries.
func TestAgentScriptJoinsOmni(t *testing.T) {
	t.Parallel()

	join := []string{
		"siderolink.api=grpc://10.77.0.3:8090?jointoken=v2:eyJ4IjoxfQ==",
		"talos.events.sink=[fdae:41e4:649b:9303::1]:8091",
		"talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092",
	}

	for _, tc := range []struct {
		name  string
		args  []string
		known bool
		want  string
	}{
		{"known", join, true, "kernel "},
		{"not read yet", nil, false, "waiting for Omni's join config"},
		{"a space would smuggle in more", []string{"a=1 chain http://evil"}, true, "waiting for Omni's join config"},
		{"a newline would end the line", []string{"a=1\nchain http://evil"}, true, "waiting for Omni's join config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s := testScripts(t, true)
			s.JoinArgs = func() ([]string, bool) { return tc.args, tc.known }

			got := s.Render(t.Context(), testReq, lifecycle.BootDecision{Boot: lifecycle.BootAgent}, token.Claims{Issued: time.Now()})
			assert.Contains(t, got.Body, tc.want)

			if tc.want == "kernel " {
				line := got.Body[strings.Index(got.Body, "kernel "):]
				line = line[:strings.IndexByte(line, '\n')]

				for _, arg := range join {
					assert.Contains(t, line, " "+arg, "the join args are on the agent's kernel line")
				}

				assert.False(t, got.AgentToken.Issued.IsZero())
			} else {
				assert.True(t, got.AgentToken.Issued.IsZero(), "no token is issued for a script that boots nothing")
				assert.NotContains(t, got.Body, "evil")
			}
		})
	}
}
