package agentapi

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
)

// kexecOrderPrefix starts the IDs of kexec orders (the lifecycle's "kexec-<allocation>").
const kexecOrderPrefix = "kexec-"

// prepTimeout bounds the making ready of one kexec target (a download from the factory).
const prepTimeout = 15 * time.Minute

// kexecPrep is a session's kexec target being made ready, in the background, so that the
// session goes on reading its agent meanwhile.
type kexecPrep struct {
	orderID string
	done    chan struct{}
	cancel  context.CancelFunc
	target  *agentv1.Kexec
	err     error
}

// ready is closed once the target is ready (or failed); nil (never ready) when none is
// being made.
func (k *kexecPrep) ready() <-chan struct{} { return k.done }

func (k *kexecPrep) stop() {
	if k.cancel != nil {
		k.cancel()
	}
}

// kexecOrder returns the kexec order with its target once it is ready and the handoff
// is recorded; nil while it is being made ready. A target that cannot be made is
// recorded as the handoff's failure: the machine is then booted through its firmware.
func (s *Server) kexecOrder(ctx context.Context, m lifecycle.Machine, next *agentv1.Order, prep *kexecPrep, logger *zap.Logger) (*agentv1.Order, error) {
	alloc := m.Allocation()

	if s.opts.Kexec == nil {
		return nil, s.kexecFailed(ctx, m.ID, alloc.ID, "the provider has no kexec targets (no boot-asset cache)", logger)
	}

	if prep.orderID != next.GetId() {
		prep.stop()

		arch := "amd64"
		if m.Machine != nil && m.Machine.Arch != "" {
			arch = m.Machine.Arch
		}

		pctx, cancel := context.WithTimeout(ctx, prepTimeout)
		*prep = kexecPrep{orderID: next.GetId(), done: make(chan struct{}), cancel: cancel}

		go func(p *kexecPrep) {
			defer close(p.done)

			p.target, p.err = s.opts.Kexec.KexecTarget(pctx, m.ID, arch, alloc)
		}(prep)

		logger.Info("making the kexec target ready", zap.String("allocation", alloc.ID))
	}

	select {
	case <-prep.done:
	default:
		return nil, nil //nolint:nilnil // not ready yet: no order, and no error
	}

	if prep.err != nil {
		err := prep.err
		prep.stop()
		*prep = kexecPrep{}

		return nil, s.kexecFailed(ctx, m.ID, alloc.ID, "the Talos boot assets could not be made ready: "+err.Error(), logger)
	}

	if err := s.opts.Recorder.RecordKexecOrdered(ctx, m.ID, alloc.ID); err != nil {
		return nil, status.Errorf(codes.Unavailable, "error recording the kexec handoff: %v", err)
	}

	s.opts.Trace.Note(m.ID, "kexec into Talos ordered (allocation "+alloc.ID+")")

	out := proto.Clone(next).(*agentv1.Order) //nolint:forcetypeassert // a clone has its original's type
	out.Action = &agentv1.Order_Kexec{Kexec: prep.target}

	// Consumed: a closed ready channel must not wake the session again.
	prep.stop()
	*prep = kexecPrep{}

	return out, nil
}

func (s *Server) kexecFailed(ctx context.Context, id, allocationID, why string, logger *zap.Logger) error {
	logger.Warn("kexec handoff failed: booting through the firmware instead", zap.String("allocation", allocationID), zap.String("reason", why))
	s.opts.Trace.Note(id, "kexec handoff failed, booting through the firmware: "+why)

	if err := s.opts.Recorder.RecordKexecFailed(ctx, id, allocationID, why); err != nil {
		return status.Errorf(codes.Unavailable, "error recording the kexec handoff: %v", err)
	}

	return nil
}

// kexecResult records what the agent said of a kexec order. Loaded means it jumps next:
// from then on the machine is booting Talos at the agent's address, which the boot
// services learn as they would from a Talos boot script served there.
func (s *Server) kexecResult(ctx context.Context, id, allocationID string, r *agentv1.OrderResult) error {
	var err error

	switch r.GetStatus() {
	case agentv1.OrderResult_STATUS_DONE:
		s.observeTalos(ctx, id)
		s.opts.Trace.Mark(id, boottrace.PhaseHandoff, "", "kexec")
		err = s.opts.Recorder.RecordKexecLoaded(ctx, id, allocationID)
	case agentv1.OrderResult_STATUS_FAILED:
		why := r.GetMessage()
		if why == "" {
			why = "failed"
		}

		s.opts.Trace.Note(id, "kexec failed in the agent, booting through the firmware: "+why)
		err = s.opts.Recorder.RecordKexecFailed(ctx, id, allocationID, why)
	default:
		return nil
	}

	if err != nil {
		return status.Errorf(codes.Unavailable, "error recording the kexec handoff: %v", err)
	}

	return nil
}

func (s *Server) observeTalos(ctx context.Context, id string) {
	e := s.opts.View.Get(id)
	if e == nil || e.Machine == nil {
		return
	}

	obs := controllers.PXEObservation{
		MachineID: id, UUID: e.Machine.UUID, Arch: e.Machine.Arch, Firmware: e.Machine.Firmware,
		Address: remote(ctx), Decision: string(lifecycle.BootTalos), At: time.Now(),
	}

	if len(e.Machine.MACs) > 0 {
		obs.MAC = e.Machine.MACs[0]
	}

	select {
	case s.opts.Observations <- obs:
	default:
		s.opts.Logger.Warn("kexec handoff not observed: the observation queue is full", zap.String("machine", id))
	}
}
