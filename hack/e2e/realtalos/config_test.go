//go:build lab

package realtalos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/labtest"
	"github.com/anvil-metal/anvil/internal/netns"
)

// clusterConfig is the lab cluster's machine configuration and talosconfig, made with
// Talos' machinery as talosctl gen config makes them: a secrets bundle of the Talos
// version's contract, a control plane's configuration (its apid signs its own
// certificate with the cluster's OS CA, where a worker's would wait for a control
// plane's trustd), the install disk, the factory's installer of the allocation's
// schematic, the factory's registry mirror over plain HTTP, and time sync off (the lab
// has no NTP). Both machines get it: Kubernetes never comes up in the lab, so the two
// control planes never meet.
type clusterConfig struct {
	config      []byte
	talosconfig string
}

func makeClusterConfig(t testing.TB, talos labtest.RealTalos, installImage string, endpoints []string) clusterConfig {
	t.Helper()

	contract, err := config.ParseContractFromVersion(talos.Version)
	require.NoError(t, err)

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
	require.NoError(t, err)

	in, err := generate.NewInput(clusterName, "https://"+endpoints[0]+":6443", kubernetesVersion,
		generate.WithSecretsBundle(bundle),
		generate.WithVersionContract(contract),
		generate.WithEndpointList(endpoints),
		generate.WithInstallDisk(installDisk),
		generate.WithInstallImage(installImage),
	)
	require.NoError(t, err)

	cfg, err := in.Config(machine.TypeControlPlane)
	require.NoError(t, err)

	var patches []configpatcher.Patch

	for _, p := range []string{labtest.RegistryMirror, labtest.TimeDisabled} {
		patch, err := configpatcher.LoadPatch([]byte(p))
		require.NoError(t, err)

		patches = append(patches, patch)
	}

	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
	require.NoError(t, err)

	// Written out without comments, as Anvil serves it byte for byte.
	patched, err := out.Config()
	require.NoError(t, err)

	b, err := patched.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	require.NoError(t, err)

	tc, err := in.Talosconfig()
	require.NoError(t, err)

	talosconfig := filepath.Join(t.TempDir(), "talosconfig")
	require.NoError(t, tc.Save(talosconfig))

	return clusterConfig{config: b, talosconfig: talosconfig}
}

// talosctl runs real talosctl with the cluster's talosconfig against the node at ip,
// from the provider's namespace (the lab network), as an admin on the site would.
func talosctl(ctx context.Context, ns, bin, talosconfig, ip string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	cmd := netns.Command(ctx, ns, bin, append([]string{"--talosconfig", talosconfig, "--endpoints", ip, "--nodes", ip}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(talosconfig))

	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("talosctl %s: %w: %s", strings.Join(args, " "), err, out)
	}

	return string(out), nil
}

// serverVersion checks talosctl version's output names version for client and server
// (talosctl is make talosctl's, the same version): the server's answer came over
// mutual TLS from the node's apid.
func serverVersion(out, version string) error {
	if strings.Count(out, "Tag:") != 2 || strings.Count(out, "Tag:         "+version) != 2 {
		return fmt.Errorf("no server tag %s in %s", version, out)
	}

	return nil
}
