//go:build lab

package omnilab_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Generous: Omni starts in 1–2 s on an idle host, and its VersionsController reads the
// versions at once; the lab host shares two cores with builds and QEMU machines.
const (
	startDeadline    = 5 * time.Minute
	versionsDeadline = 3 * time.Minute
)

const providerID = "anvil-lab-test"

// TestLabOmni runs a real Omni the way the lab does — its own network namespace on a lab
// network of the test's own, its own mount namespace, the factory stand-in for versions —
// and checks what the provider and the agent will rely on: its API answers over TLS
// verified with the lab CA, from the provider's namespace; omnictl, trusting the CA, makes
// an infra provider whose key works; the provider's join configuration carries the
// kernel arguments machines join with; its Talos versions include the lab's. Then it
// stops everything and checks that nothing is left: no process, namespace, link, mount
// or file.
func TestLabOmni(t *testing.T) {
	requireHost(t)

	omniBin, omnictlBin := labtest.OmniBinaries(t, labtest.RepoRoot(t))

	tmp := t.TempDir()
	dir, log := filepath.Join(tmp, "omni"), filepath.Join(tmp, "omni.log")
	n := labnet.New(fmt.Sprintf("omt%d", os.Getpid()%100000))

	// omnictl must write nothing into $HOME: give it one to watch.
	home := filepath.Join(tmp, "home")
	require.NoError(t, os.Mkdir(home, 0o755))
	t.Setenv("HOME", home)

	var o *omnilab.Omni

	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("omni's log (%s):\n%s", log, b)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		var omniPID int
		if o != nil {
			omniPID = o.PID
		}

		assert.NoError(t, o.Stop(ctx), "stopping Omni")

		for _, ns := range n.Namespaces() {
			pids, err := netns.PIDs(ns)
			assert.NoError(t, err)
			assert.Empty(t, pids, "processes left in namespace %s", ns)
		}

		assert.NoError(t, n.Down(), "removing the lab network")
		assertNothingLeft(t, n, dir, omniPID)
	})

	require.NoError(t, n.Up())
	require.NoError(t, n.UpOmni())

	factory := serveFactory(t, n.ProviderNS)

	ctx, cancel := context.WithTimeout(t.Context(), startDeadline)
	defer cancel()

	start := time.Now()

	var err error

	o, err = omnilab.Start(ctx, omnilab.Config{
		Bin: omniBin, Dir: dir, Log: log, NetNS: n.OmniNS,
		FactoryURL: "http://" + factory, Registry: factory,
	})
	require.NoError(t, err)
	t.Logf("Omni ready in %s (pid %d)", time.Since(start).Round(time.Millisecond), o.PID)

	t.Run("TLS verified with the lab CA, across the bridge", func(t *testing.T) {
		client, err := omnilab.HTTPClient(n.ProviderNS, o.CAFile())
		require.NoError(t, err)

		resp, err := client.Get(o.Endpoint() + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)

		// And without the lab CA, Omni is not trusted: the verification is real.
		untrusting := &http.Client{Transport: &http.Transport{
			DialContext:     omnilab.Dialer(n.ProviderNS),
			TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		}}

		_, err = untrusting.Get(o.Endpoint() + "/healthz") // no response to close: the handshake fails
		assert.ErrorContains(t, err, "certificate signed by unknown authority")
	})

	t.Run("confined", func(t *testing.T) {
		// No route but the lab subnet's, IPv4 or IPv6.
		for _, family := range []string{"-4", "-6"} {
			out, err := exec.CommandContext(ctx, "ip", family, "-n", n.OmniNS, "route", "show", "default").CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Empty(t, strings.TrimSpace(string(out)), "Omni's namespace has a default route (%s)", family)
		}

		// Its SideroLink TUN is in its namespace, its WireGuard socket in its own /run.
		out, err := exec.CommandContext(ctx, "ip", "-n", n.OmniNS, "-brief", "address", "show", "dev", "siderolink").CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), omnilab.SideroLinkAddr)

		_, err = os.Stat("/run/wireguard/siderolink.sock")
		assert.ErrorIs(t, err, os.ErrNotExist, "Omni's WireGuard socket is on the host's /run")
		assert.Empty(t, omniMounts(t), "Omni's /run is mounted where the host sees it")

		// Made once SideroLink's device runs, a moment after Omni answers.
		sock := fmt.Sprintf("/proc/%d/root/run/wireguard/siderolink.sock", o.PID)
		assert.Eventually(t, func() bool {
			_, err := os.Stat(sock)

			return err == nil
		}, time.Minute, 100*time.Millisecond, "Omni's WireGuard socket, in its own /run")
	})

	client := o.Client(omnictlBin, n.ProviderNS)

	var providerKey string

	t.Run("infra provider", func(t *testing.T) {
		providerKey, err = client.CreateInfraProvider(ctx, providerID)
		require.NoError(t, err)

		raw, err := base64.StdEncoding.DecodeString(providerKey)
		require.NoError(t, err, "the key is base64")

		var sa struct {
			Name   string `json:"name"`
			PGPKey string `json:"pgp_key"`
		}

		require.NoError(t, json.Unmarshal(raw, &sa), "the key is a service account's JSON")
		assert.Equal(t, "infra-provider:"+providerID, sa.Name)
		assert.Contains(t, sa.PGPKey, "BEGIN PGP PRIVATE KEY BLOCK")

		// The provider's own key reads its join configuration, as the provider will.
		jc, err := client.As(providerKey).ProviderJoinConfig(ctx, providerID)
		require.NoError(t, err, "the provider reading its join configuration with its own key")

		// siderolink.api=grpc://10.77.0.3:8090?jointoken=v2%3A… (Omni escapes the token), a
		// v2 token naming the provider; the event sink and log server over SideroLink.
		require.Len(t, jc.KernelArgs, 3, "%q", jc.KernelArgs)
		assert.True(t, strings.HasPrefix(jc.KernelArgs[0], "siderolink.api=grpc://"+omnilab.Addr+":8090?jointoken="), "%q", jc.KernelArgs[0])
		assert.Equal(t, []string{
			"talos.events.sink=[fdae:41e4:649b:9303::1]:8091",
			"talos.logging.kernel=tcp://[fdae:41e4:649b:9303::1]:8092",
		}, jc.KernelArgs[1:])

		u, token, err := jc.SideroLinkAPI()
		require.NoError(t, err)
		assert.Equal(t, "grpc", u.Scheme)
		assert.Equal(t, o.MachineAPIURL(), u.Scheme+"://"+u.Host)

		encoded, ok := strings.CutPrefix(token, "v2:")
		require.True(t, ok, "a v2 join token: %q", token)

		raw, err = base64.StdEncoding.DecodeString(encoded)
		require.NoError(t, err)

		var v2 struct {
			ExtraData map[string]string `json:"extra_data"`
			Signature string            `json:"signature"`
		}

		require.NoError(t, json.Unmarshal(raw, &v2), "%s", raw)
		assert.Equal(t, providerID, v2.ExtraData["omni.sidero.dev/infra-provider-id"])
		assert.NotEmpty(t, v2.Signature)

		assert.NotEmpty(t, jc.JoinToken)
		assert.Contains(t, jc.Config, "kind: SideroLinkConfig")

		// The admin reads the same.
		admin, err := client.ProviderJoinConfig(ctx, providerID)
		require.NoError(t, err)
		assert.Equal(t, jc.KernelArgs, admin.KernelArgs)
	})

	t.Run("Talos versions", func(t *testing.T) {
		var versions []string

		require.Eventually(t, func() bool {
			versions, err = client.TalosVersions(ctx)

			return err == nil && slices.Contains(versions, "1.9.0")
		}, versionsDeadline, time.Second, "Omni's Talos versions do not include the lab's v1.9.0: %q (%v)", versions, err)
	})

	entries, err := os.ReadDir(home)
	require.NoError(t, err)
	assert.Empty(t, entries, "omnictl wrote into $HOME")
}

// TestLabOmniUpDown: "lab up --omni" through the lab's Go API (no machines) runs Omni in
// <prefix>-omni beside the provider and the factory stand-in, and status shows it; down
// leaves nothing of it, also when the state file is gone (the sweep).
func TestLabOmniUpDown(t *testing.T) {
	requireHost(t)

	root := labtest.RepoRoot(t)
	omniBin, omnictlBin := labtest.OmniBinaries(t, root)

	bin := t.TempDir()
	factory := filepath.Join(bin, "lab-factory")
	provider := labtest.BuildProvider(t, root, bin)
	labtest.GoBuild(t, root, factory, "./hack/cmd/lab-factory")

	dir, prefix := labtest.NewLab(t, "omu", nil)

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, ProviderBin: provider, AgentAssetsDir: t.TempDir(), APIPort: 50042,
		FactoryURL: "http://10.77.0.1:8080", FactoryPXEURL: "http://10.77.0.1:8080",
		FactoryBin: factory, OmniBin: omniBin, OmnictlBin: omnictlBin,
	}

	for _, lost := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), startDeadline)

		s, err := lab.Up(ctx, cfg)

		cancel()
		require.NoError(t, err) // NewLab's teardown prints the lab's logs, Omni's included
		require.True(t, s.Omni.Running())
		assert.Equal(t, prefix+"-omni", s.OmniNS)

		var status strings.Builder
		require.NoError(t, s.WriteStatus(&status))
		assert.Contains(t, status.String(), "omni      pid ")
		assert.Contains(t, status.String(), "https://10.77.0.3:8099")

		client, err := s.OmniClient(omnictlBin)
		require.NoError(t, err)

		out, err := client.Run(t.Context(), "get", "talosversions")
		require.NoError(t, err)
		t.Logf("talosversions:\n%s", out)

		omniPID := s.Omni.PID

		if lost {
			require.NoError(t, os.Remove(lab.StateFile(dir)))
		}

		ctx, cancel = context.WithTimeout(t.Context(), 2*time.Minute)
		require.NoError(t, lab.Down(ctx, dir, prefix))
		cancel()

		assertNothingLeft(t, labnet.New(prefix), lab.OmniDir(dir), omniPID)
		assert.Empty(t, lab.Processes(dir), "the lab's processes (lost state: %t)", lost)
	}
}

// requireHost skips the test where Omni cannot run: where the lab cannot (see
// labtest.RequireHost), or a tool Omni's namespace needs is missing.
func requireHost(t *testing.T) {
	t.Helper()

	labtest.RequireHost(t)

	for _, tool := range []string{"unshare", "mount", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}

	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("needs /dev/net/tun: %v", err)
	}
}

// serveFactory serves the factory stand-in from this test, on a socket in namespace ns
// on the lab's factory address (the lab runs it there as hack/cmd/lab-factory), and
// returns its host:port.
func serveFactory(t *testing.T, ns string) string {
	t.Helper()

	addr := net.JoinHostPort(labnet.ProviderAddr, "8080")

	var l net.Listener

	require.NoError(t, netns.Do(ns, func() error {
		var err error

		l, err = net.Listen("tcp", addr)

		return err
	}))

	srv := &http.Server{Handler: labfactory.New(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)

	go func() { done <- srv.Serve(l) }()

	t.Cleanup(func() {
		srv.Close()

		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the factory stand-in: %v", err)
		}
	})

	return addr
}

// omniMounts lists the mounts of Omni's /run (omnilab mounts a tmpfs named omni-run)
// the host sees: none, its mount namespace being its own.
func omniMounts(t *testing.T) []string {
	t.Helper()

	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)

	var mounts []string

	for line := range strings.SplitSeq(string(b), "\n") {
		// mount ID, parent, major:minor, root, mount point, options… - fstype source options
		_, after, ok := strings.Cut(line, " - ")
		if fields := strings.Fields(after); ok && len(fields) > 1 && fields[1] == "omni-run" {
			mounts = append(mounts, line)
		}
	}

	return mounts
}

// assertNothingLeft: no process of Omni's, no namespace or link of the lab network, no
// mount of Omni's, no WireGuard socket and no Omni directory.
func assertNothingLeft(t *testing.T, n *labnet.Net, dir string, omniPID int) {
	t.Helper()

	if omniPID != 0 {
		assert.False(t, proc.Alive(omniPID), "Omni still runs")
	}

	assert.Empty(t, proc.FindByArg(dir+"/", "omni", "unshare", "sh", "ip"), "processes naming Omni's directory")

	for _, ns := range n.Namespaces() {
		assert.False(t, netns.Exists(ns), "namespace %s is left", ns)
	}

	assert.Empty(t, omniMounts(t), "Omni's /run is mounted where the host sees it")

	_, err := os.Stat("/run/wireguard/siderolink.sock")
	assert.ErrorIs(t, err, os.ErrNotExist)

	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "Omni's directory")
}
