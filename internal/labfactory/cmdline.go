package labfactory

import (
	"github.com/siderolabs/go-procfs/procfs"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
	"github.com/siderolabs/talos/pkg/machinery/kernel"
)

// TalosCmdline is the kernel command line the Image Factory boots a schematic's real
// Talos with (cmdline-<platform>-<arch>, and its PXE script), as Talos' imager builds it:
// the platform, the metal platform's console for the architecture, Talos' defaults for
// the version (machinery's kernel.DefaultArgs: KSPP's slab_nomerge and pti=on among them,
// without which Talos refuses to boot), then the schematic's extra arguments, a console
// or platform among them replacing the default ones and a "-arg" deleting one.
func TalosCmdline(version, platform, arch string, extra []string) (string, error) {
	q := quirks.New(version)
	cmdline := procfs.NewCmdline("")

	cmdline.Append("talos.platform", platform)

	// Talos' metal platform: console=tty0 (and ttyS0 before 1.8) on amd64, the PL011 on
	// arm64.
	switch {
	case arch == "arm64":
		cmdline.SetAll([]string{"console=ttyAMA0", "console=tty0"})
	case q.SupportsMetalPlatformConsoleTTYS0():
		cmdline.SetAll([]string{"console=ttyS0", "console=tty0"})
	default:
		cmdline.SetAll([]string{"console=tty0"})
	}

	if err := cmdline.AppendAll(kernel.DefaultArgs(q)); err != nil {
		return "", err //nolint:wrapcheck // procfs names the argument
	}

	if err := cmdline.AppendAll(extra,
		procfs.WithOverwriteArgs("console"),
		procfs.WithOverwriteArgs("talos.platform"),
		procfs.WithDeleteNegatedArgs(),
	); err != nil {
		return "", err //nolint:wrapcheck // procfs names the argument
	}

	return cmdline.String(), nil
}
