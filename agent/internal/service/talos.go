package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/anvil-metal/anvil/agent/internal/orders"
	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
)

// errNoKexecUnderTalos is what a kexec order gets in extension mode. Talos runs extension
// services in a PID namespace of their own, where reboot(2) cannot start a loaded kernel
// (the kernel refuses LINUX_REBOOT_CMD_KEXEC outside the initial PID namespace), and
// machined starts only a kernel it loaded itself. The provider then boots the machine
// the long way.
var errNoKexecUnderTalos = errors.New("kexec is not available to the agent under Talos (extension mode): reboot through the firmware instead")

// machinedCallTimeout bounds a call to machined: it answers at once and reboots after.
const machinedCallTimeout = 30 * time.Second

// talosActions are the orders' effects under Talos: disks and the BMC as in the
// initramfs, through the /dev Talos lends the extension; reboot and power-off asked of
// machined, since reboot(2) in the extension's PID namespace would only end the agent's
// own container (and Talos would start it again).
type talosActions struct {
	machine  *machineActions
	machined talosPower
	logger   *zap.Logger
	dryRun   bool
}

// talosPower is what the agent asks of Talos.
type talosPower interface {
	Reboot(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

var _ orders.Actions = (*talosActions)(nil)

func (a *talosActions) Reboot(ctx context.Context) error {
	if a.dryRun {
		a.logger.Info("dry run: would ask Talos to reboot")

		return nil
	}

	return a.machined.Reboot(ctx)
}

func (a *talosActions) PowerOff(ctx context.Context) error {
	if a.dryRun {
		a.logger.Info("dry run: would ask Talos to power off")

		return nil
	}

	return a.machined.Shutdown(ctx)
}

// LoadKexec refuses before downloading anything: nothing it loaded could be booted.
func (a *talosActions) LoadKexec(context.Context, *agentv1.Kexec) error {
	return errNoKexecUnderTalos
}

func (a *talosActions) JumpKexec(context.Context) error { return errNoKexecUnderTalos }

func (a *talosActions) Wipe(ctx context.Context, w *agentv1.Wipe) (*agentv1.WipeReport, error) {
	return a.machine.Wipe(ctx, w)
}

func (a *talosActions) GetBMC(ctx context.Context) (*agentv1.BMCInfo, error) {
	return a.machine.GetBMC(ctx)
}

func (a *talosActions) SetBMC(ctx context.Context, s *agentv1.SetBMC) (*agentv1.BMCInfo, error) {
	return a.machine.SetBMC(ctx, s)
}

// machined is Talos' machined API on its local socket, as Talos' own extensions reach it
// (qemu-guest-agent, nut-client): the extension service mounts the socket, and machined
// grants extension services the roles they ask for in the request's metadata.
type machined struct {
	// socket is machined's socket (constants.MachineSocketPath when empty).
	socket string
}

// Reboot asks for a reboot through the firmware (power cycle mode): the provider's
// reboot means "boot what the provider serves now", which a Talos kexec would skip.
func (m *machined) Reboot(ctx context.Context) error {
	return m.call(ctx, "reboot", func(ctx context.Context, c machine.MachineServiceClient) error {
		_, err := c.Reboot(ctx, &machine.RebootRequest{Mode: machine.RebootRequest_POWERCYCLE})

		return err
	})
}

// Shutdown asks Talos to power the machine off, its services stopped first.
func (m *machined) Shutdown(ctx context.Context) error {
	return m.call(ctx, "power off", func(ctx context.Context, c machine.MachineServiceClient) error {
		_, err := c.Shutdown(ctx, &machine.ShutdownRequest{})

		return err
	})
}

func (m *machined) call(ctx context.Context, what string, do func(context.Context, machine.MachineServiceClient) error) error {
	socket := m.socket
	if socket == "" {
		socket = constants.MachineSocketPath
	}

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("error connecting to Talos' machined at %s to %s: %w", socket, what, err)
	}

	defer conn.Close()

	ctx, cancel := context.WithTimeout(ctx, machinedCallTimeout)
	defer cancel()

	ctx = metadata.AppendToOutgoingContext(ctx, constants.APIAuthzRoleMetadataKey, string(role.Operator))

	if err = do(ctx, machine.NewMachineServiceClient(conn)); err != nil {
		return fmt.Errorf("error asking Talos' machined to %s: %w", what, err)
	}

	return nil
}
