package labtest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hack/internal/lab"
)

// TalosKernelArgs are the lab's site-wide Talos kernel arguments (the provider's
// --talos-kernel-args): its machines' serial console (the factory's metal command line
// has only tty0), no dashboard on it (its redraws cost an emulated CPU), and no IO-APIC
// timer check, which a loaded host's emulated timer can fail.
const TalosKernelArgs = "console=ttyS0 talos.dashboard.disabled=1 no_timer_check"

// TalosDeadline bounds a step of real Talos under TCG, on two cores shared with other
// labs' machines: its ~140 MiB initramfs fetched and booted (into maintenance and
// SideroLink, 2–4 min for two machines at once), its config, the installer's ~200 MiB
// pulled and laid down (4–5 min), the reboot or kexec into the installed system; or a
// reset and the wipe after.
const TalosDeadline = 25 * time.Minute

// Lines real Talos (make talos) prints on the serial console, which the lab's tests
// wait for.
const (
	// TalosFromMetal is machined loading its configuration from the metal platform: the
	// talos.config= URL (Anvil's metadata server) answered, and Talos validated what it
	// got.
	TalosFromMetal = `"sources": ["metal"]`
	// TalosFromState is machined loading its configuration from its STATE partition:
	// Talos runs from its disk on the configuration it installed with.
	TalosFromState = `"sources": ["state"]`
	// TalosInstalledFmt is the installer's last line, with the Talos version.
	TalosInstalledFmt = "installation of %s complete"
	// GRUBBoot is the installed GRUB's menu: the machine booted its disk.
	GRUBBoot = "GNU GRUB"
	// TalosKernel marks the Talos kernel's command line (the agent's has no
	// talos.platform).
	TalosKernel = "talos.platform=metal"
)

// TalosConfigRefused are machined's words for a configuration from the metal platform it
// could not load or refused to validate (config/acquire.go): a test seeing one has failed.
var TalosConfigRefused = []string{
	"failed to load config via platform",
	"failed to validate config acquired via platform",
	"failed to runtime validate config acquired via platform",
	"error acquiring via platform",
}

// Schematic is the ID of the schematic the lab provider builds for an allocation of no
// extensions and no kernel arguments of its own: the site's TalosKernelArgs only (the
// boot's own arguments are never in it). The provider must run with
// --detected-extensions=false: the factory's real Talos has no extension images, and
// TCG's CPU would call for one. A test that names an installer before it allocates
// computes it here, and checks it against the allocation's.
func (RealTalos) Schematic(t testing.TB) string {
	t.Helper()

	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = strings.Fields(TalosKernelArgs)

	id, err := sc.ID()
	require.NoError(t, err)

	return id
}

// InstallImage is the factory's installer of the schematic for the Talos version, as
// Omni names it (<factory>/metal-installer/<schematic>:<version>): its UKI carries the
// schematic's kernel arguments, so the installed Talos prints on the serial console. The
// factory's registry is plain HTTP: a config pulling it needs RegistryMirror.
func (r RealTalos) InstallImage(schematicID string) string {
	return fmt.Sprintf("%s/metal-installer/%s:%s", lab.FactoryListen, schematicID, r.Version)
}

// RegistryMirror is the machine-config mirror of the factory's registry over plain HTTP
// (machine.registries.mirrors), as a strategic-merge patch: Talos pulls its installer
// from there.
const RegistryMirror = "machine:\n  registries:\n    mirrors:\n      " + lab.FactoryListen + ":\n        endpoints:\n          - http://" + lab.FactoryListen + "\n"

// TimeDisabled is the machine-config patch that turns Talos' time sync off: the lab has
// no NTP server, and trustd and etcd would wait for a synced clock for ever.
const TimeDisabled = "machine:\n  time:\n    disabled: true\n"

// CountIn counts the occurrences of s in the file at path (0 when there is none).
func CountIn(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}

	return strings.Count(string(b), s)
}

// RefusedConfig is the first of TalosConfigRefused's lines in the serial log at path, ""
// when there is none.
func RefusedConfig(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}

	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range TalosConfigRefused {
			if strings.Contains(l, s) {
				return strings.TrimSpace(l)
			}
		}
	}

	return ""
}
