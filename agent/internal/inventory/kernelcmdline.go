package inventory

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/bootparams"
)

// KernelCmdlineController publishes the kernel command line as the singleton
// runtime.KernelCmdline, as Talos does; Omni shows it with the machine.
type KernelCmdlineController struct {
	ProcRoot string

	firstPass
}

// Name implements controller.Controller.
func (ctrl *KernelCmdlineController) Name() string { return "inventory.KernelCmdlineController" }

// Inputs implements controller.Controller.
func (ctrl *KernelCmdlineController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *KernelCmdlineController) Outputs() []controller.Output {
	return []controller.Output{{Type: runtimeres.KernelCmdlineType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller. The command line does not change while
// the kernel runs, so it is read on the first event only.
func (ctrl *KernelCmdlineController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	pace := ctrl.pacer(nil)

	for pace.next(ctx, r) {
		cmdline, err := readCmdline(ctrl.ProcRoot)
		if err != nil {
			// Without procfs (a test, a run outside an initramfs) there is no
			// command line to report, which is no reason to stop.
			logger.Warn("no kernel command line", zap.Error(err))

			continue
		}

		if err = safe.WriterModify(ctx, r, runtimeres.NewKernelCmdline(), func(res *runtimeres.KernelCmdline) error {
			*res.TypedSpec() = kernelCmdline(cmdline)

			return nil
		}); err != nil {
			return fmt.Errorf("error updating kernel command line: %w", err)
		}
	}

	return nil
}

// kernelCmdline is what Talos makes of /proc/cmdline: the line without the
// newline the kernel ends it with — less its secrets (bootparams.Redact: the agent's
// per-boot token, Omni's join token, …), whose values are replaced: whoever reads the
// resource (Omni, and its users through it) must not be able to speak to the provider
// as this machine's agent. The kernel log shipped to Omni hides the same.
func kernelCmdline(raw string) runtimeres.KernelCmdlineSpec {
	return runtimeres.KernelCmdlineSpec{Cmdline: bootparams.Redact(strings.Join(strings.Fields(raw), " "))}
}

// readCmdline reads procRoot/cmdline.
func readCmdline(procRoot string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "cmdline"))
	if err != nil {
		return "", fmt.Errorf("error reading the kernel command line: %w", err)
	}

	return string(b), nil
}

// optionalCmdline reads procRoot/cmdline and returns "" when there is none: a
// value taken from the command line then has its default.
func optionalCmdline(procRoot string, logger *zap.Logger) string {
	cmdline, err := readCmdline(procRoot)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		logger.Warn("error reading the kernel command line", zap.Error(err))
	}

	return cmdline
}
