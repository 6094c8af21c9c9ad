package omni

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/omni/client/api/omni/specs"
	"github.com/siderolabs/omni/client/pkg/omni/resources/infra"
	omnires "github.com/siderolabs/omni/client/pkg/omni/resources/omni"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/timestamppb"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
)

// StatusSource is where the provider's statuses come from: the adapter API's stream.
type StatusSource interface {
	Recv() (*omniadapterv1.MachineStatusEvent, error)
}

// WriteStatuses writes each status the provider reports as the machine's
// infra.MachineStatus in Omni, and removes it when the provider reports the machine
// gone, until ctx is done (nil), the source ends or a write fails.
func WriteStatuses(ctx context.Context, st state.State, src StatusSource, logger *zap.Logger) error {
	for {
		ev, err := src.Recv()

		switch {
		case ctx.Err() != nil:
			return nil //nolint:nilerr // the stream ends with ctx: stopping is no failure
		case errors.Is(err, io.EOF):
			// The provider ended the stream: the caller watches again.
			return errors.New("the provider ended the statuses' stream")
		case err != nil:
			return fmt.Errorf("error receiving the provider's statuses: %w", err)
		}

		id := ev.GetStatus().GetId()
		if id == "" {
			return errors.New("the provider sent a status without a machine")
		}

		if ev.GetRemoved() {
			if err = st.TeardownAndDestroy(ctx, infra.NewMachineStatus(id).Metadata()); err != nil && !state.IsNotFoundError(err) {
				return fmt.Errorf("error removing the infra machine status of %s: %w", id, err)
			}

			continue
		}

		if err = writeStatus(ctx, st, ev.GetStatus()); err != nil {
			return err
		}

		logger.Debug("Omni: machine status written", zap.String("machine", id), zap.Bool("ready_to_use", ev.GetStatus().GetReadyToUse()))
	}
}

// writeStatus writes one infra.MachineStatus: its spec, and the provider's labels —
// Omni's own (omni.sidero.dev/…) are left as they are; a label the provider no longer
// reports goes.
func writeStatus(ctx context.Context, st state.State, s *omniadapterv1.MachineStatus) error {
	_, err := safe.StateModifyWithResult(ctx, st, infra.NewMachineStatus(s.GetId()), func(ms *infra.MachineStatus) error {
		spec := ms.TypedSpec().Value
		spec.ReadyToUse = s.GetReadyToUse()
		spec.Installed = s.GetInstalled()
		spec.LastRebootId = s.GetLastRebootId()
		spec.LastPowerOffId = s.GetLastPowerOffId()
		spec.WipedNodeUniqueToken = s.GetWipedNodeUniqueToken()
		spec.LastRebootTimestamp = nil

		if ns := s.GetLastRebootUnixNano(); ns != 0 {
			spec.LastRebootTimestamp = timestamppb.New(time.Unix(0, ns))
		}

		switch s.GetPower() {
		case omniadapterv1.MachineStatus_POWER_ON:
			spec.PowerState = specs.InfraMachineStatusSpec_POWER_STATE_ON
		case omniadapterv1.MachineStatus_POWER_OFF:
			spec.PowerState = specs.InfraMachineStatusSpec_POWER_STATE_OFF
		default:
			spec.PowerState = specs.InfraMachineStatusSpec_POWER_STATE_UNKNOWN
		}

		labels := ms.Metadata().Labels()

		for k := range labels.Raw() {
			if _, keep := s.GetLabels()[k]; !keep && !strings.HasPrefix(k, omnires.SystemLabelPrefix) {
				labels.Delete(k)
			}
		}

		for k, v := range s.GetLabels() {
			labels.Set(k, v)
		}

		return nil
	})
	if err != nil {
		return fmt.Errorf("error writing the infra machine status of %s: %w", s.GetId(), err)
	}

	return nil
}

// followStatuses writes the provider's statuses into Omni, from the stream the provider
// serves the adapter on its socket.
func (c *Connection) followStatuses(ctx context.Context) error {
	client, closeConn, err := c.providerClient()
	if err != nil {
		return err
	}

	defer closeConn()

	stream, err := client.WatchMachineStatuses(ctx, &omniadapterv1.WatchMachineStatusesRequest{})
	if err != nil {
		return fmt.Errorf("error watching the provider's statuses: %w", err)
	}

	return WriteStatuses(ctx, c.st, stream, c.opts.Logger)
}
