package httpapi

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
)

const maxEventSize = 64 << 10

// Talos' install sequence as its events show it (machined's sequencer, v1.13): the
// sequence's phases run one after another, each only once the one before succeeded —
// install, meta, saveMeta, volumeFinalize, stopEverything, kexec, reboot. Its kexec
// phase starting says the installer laid Talos on the disk and Talos is about to boot
// it (Talos' own machine status turns "rebooting" there); the reboot then ends the
// sequence as a failure with unix.Reboot as its error (a NOOP with a FATAL error,
// Sidero's and Omni's sign of an install). The sequence's STOP proves nothing: Talos
// publishes it whether the install worked or not. And what comes after the last phase
// may never arrive: machined stops its event sink as it reboots, and a last event can
// be dropped then.
const (
	installSequence = "install"
	kexecPhase      = "kexec"
	rebootError     = "unix.Reboot"
)

// eventSink implements Talos' event sink API (talos.events.sink=): an install sequence
// that got to its kexec phase, or to its reboot, marks the machine installed.
type eventSink struct {
	events.UnimplementedEventSinkServiceServer

	server *Server

	mu sync.Mutex
	// running is the Talos sequence each machine's Talos last started, and under which
	// allocation: its phase events say nothing of their sequence. One entry per
	// allocated machine at most; the stop of the sequence removes it.
	running map[resource.ID]runningSequence
}

type runningSequence struct {
	allocation, sequence string
}

// Publish implements events.EventSinkServiceServer.
func (e *eventSink) Publish(ctx context.Context, req *events.EventRequest) (*events.EventResponse, error) {
	s := e.server

	if req.GetData() == nil {
		s.metrics.events.WithLabelValues("malformed").Inc()

		return nil, grpcstatus.Error(codes.InvalidArgument, "event has no data")
	}

	// Talos names its messages talos/runtime/<full name>, anypb type.googleapis.com/<full name>.
	name := req.GetData().GetTypeUrl()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}

	var (
		install bool
		err     error
		// The sender's machine, looked up once, and only for an event that needs it.
		from = sync.OnceValues(func() (sender, error) { return e.machineFrom(ctx) })
	)

	switch name {
	case "machine.SequenceEvent":
		install, err = e.sequence(req, from)
	case "machine.PhaseEvent":
		install, err = e.phase(req, from)
	}

	if err != nil {
		return nil, err
	}

	if !install {
		s.metrics.events.WithLabelValues("ignored").Inc()

		return &events.EventResponse{}, nil
	}

	sent, err := from()
	if err != nil {
		s.metrics.events.WithLabelValues("refused").Inc()
		_ = s.opts.Tamper.Report(ctx, tamper.Event{Kind: tamper.ForeignEvent, Remote: peerHost(ctx), Detail: "install event refused: " + err.Error()}) // no machine to hold

		return nil, grpcstatus.Error(codes.PermissionDenied, err.Error())
	}

	e.forget(sent.id)

	// The kexec phase and the reboot after it both say so: the first one counts.
	if m := s.opts.View.Get(sent.id); m != nil && m.Installed() {
		s.metrics.events.WithLabelValues("ignored").Inc()

		return &events.EventResponse{}, nil
	}

	if err = s.opts.Installs.RecordInstalled(ctx, sent.id, sent.allocation, "event-sink"); err != nil {
		return nil, grpcstatus.Errorf(codes.Unavailable, "error recording the install: %v", err)
	}

	s.metrics.events.WithLabelValues("installed").Inc()

	return &events.EventResponse{}, nil
}

// sequence follows a Talos sequence's start and stop, and says whether the event is
// the install sequence's end in a reboot.
func (e *eventSink) sequence(req *events.EventRequest, from func() (sender, error)) (bool, error) {
	var ev machine.SequenceEvent
	if err := req.GetData().UnmarshalTo(&ev); err != nil {
		e.server.metrics.events.WithLabelValues("malformed").Inc()

		return false, grpcstatus.Errorf(codes.InvalidArgument, "malformed sequence event: %v", err)
	}

	switch ev.GetAction() {
	case machine.SequenceEvent_START, machine.SequenceEvent_STOP:
		// Only a machine booting Talos for an allocation is followed; another sender's
		// sequences are none of the provider's business.
		m, err := from()
		if err != nil {
			return false, nil // not a machine of the provider's: nothing to follow
		}

		e.server.opts.Logger.Info("Talos sequence", zap.String("machine", m.id), zap.String("sequence", ev.GetSequence()),
			zap.Stringer("action", ev.GetAction()))

		e.mu.Lock()
		defer e.mu.Unlock()

		if ev.GetAction() == machine.SequenceEvent_STOP {
			delete(e.running, m.id)

			return false, nil
		}

		if e.running == nil {
			e.running = map[resource.ID]runningSequence{}
		}

		e.running[m.id] = runningSequence{allocation: m.allocation, sequence: ev.GetSequence()}

		return false, nil
	case machine.SequenceEvent_NOOP:
		return ev.GetSequence() == installSequence && ev.GetError().GetCode() == common.Code_FATAL &&
			strings.Contains(ev.GetError().GetMessage(), rebootError), nil
	default:
		return false, nil
	}
}

// phase says whether the event is the install sequence's kexec phase starting.
func (e *eventSink) phase(req *events.EventRequest, from func() (sender, error)) (bool, error) {
	var ev machine.PhaseEvent
	if err := req.GetData().UnmarshalTo(&ev); err != nil {
		e.server.metrics.events.WithLabelValues("malformed").Inc()

		return false, grpcstatus.Errorf(codes.InvalidArgument, "malformed phase event: %v", err)
	}

	if ev.GetPhase() != kexecPhase || ev.GetAction() != machine.PhaseEvent_START {
		return false, nil
	}

	m, err := from()
	if err != nil {
		return false, nil // not a machine of the provider's: no sequence of its followed
	}

	e.mu.Lock()
	defer e.mu.Unlock()

	r, ok := e.running[m.id]

	return ok && r.allocation == m.allocation && r.sequence == installSequence, nil
}

// forget drops what was followed of the machine's sequences.
func (e *eventSink) forget(id resource.ID) {
	e.mu.Lock()
	defer e.mu.Unlock()

	delete(e.running, id)
}

// sender is the machine booting Talos an event came from, and its allocation.
type sender struct {
	id         resource.ID
	allocation string
}

// machineFrom finds the machine booting Talos that the event came from, by its sender's
// address.
func (e *eventSink) machineFrom(ctx context.Context) (sender, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return sender{}, grpcstatus.Error(codes.Internal, "no peer address")
	}

	id, alloc, err := e.machineAt(hostOf(p.Addr.String()))

	return sender{id: id, allocation: alloc}, err
}

// machineAt finds the machine booting Talos from addr: events are accepted only from the
// address that fetched the machine's configuration with the token of its current
// allocation (the fetch binds the token to its address: handleMetadata), while it is
// allocated and not held. The address a boot script was fetched from proves nothing:
// any host may fetch one for any machine's UUID.
func (e *eventSink) machineAt(addr string) (resource.ID, string, error) {
	view := e.server.opts.View

	if t, ok := view.TalosAt(addr); ok {
		if m := view.Get(t.Machine); m != nil {
			if alloc, ok := allocated(m); ok && alloc == t.Allocation {
				if m.Intent.Held != "" {
					return "", "", fmt.Errorf("machine %s is held after a security event", m.ID)
				}

				return m.ID, alloc, nil
			}
		}
	}

	return "", "", fmt.Errorf("no allocated machine fetched its configuration from %s", addr)
}

// allocated returns the allocation of a machine, reporting false for one that is not
// (or no longer) allocated.
func allocated(m *machineview.Entry) (string, bool) {
	if m.Intent == nil || m.Intent.Allocation == nil {
		return "", false
	}

	return m.Intent.Allocation.ID, true
}

// peerHost is the host of the gRPC peer, "" when unknown.
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}

	return hostOf(p.Addr.String())
}

// hostOf is the host of addr (host:port), or addr itself.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}

	return addr
}
