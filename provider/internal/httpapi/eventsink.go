package httpapi

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
)

const maxEventSize = 64 << 10

// eventSink implements Talos' event sink API (talos.events.sink=): the install sequence
// completing marks the machine installed.
type eventSink struct {
	events.UnimplementedEventSinkServiceServer

	server *Server
}

// Publish implements events.EventSinkServiceServer.
func (e *eventSink) Publish(ctx context.Context, req *events.EventRequest) (*events.EventResponse, error) {
	s := e.server

	if req.GetData() == nil {
		s.metrics.events.WithLabelValues("malformed").Inc()

		return nil, grpcstatus.Error(codes.InvalidArgument, "event has no data")
	}

	// Talos names its messages talos/runtime/<full name>.
	name := req.GetData().GetTypeUrl()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}

	if name != "machine.SequenceEvent" {
		s.metrics.events.WithLabelValues("ignored").Inc()

		return &events.EventResponse{}, nil
	}

	var ev machine.SequenceEvent
	if err := req.GetData().UnmarshalTo(&ev); err != nil {
		s.metrics.events.WithLabelValues("malformed").Inc()

		return nil, grpcstatus.Errorf(codes.InvalidArgument, "malformed sequence event: %v", err)
	}

	if ev.GetSequence() != "install" || ev.GetAction() != machine.SequenceEvent_STOP || ev.GetError() != nil {
		s.metrics.events.WithLabelValues("ignored").Inc()

		return &events.EventResponse{}, nil
	}

	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, grpcstatus.Error(codes.Internal, "no peer address")
	}

	addr := p.Addr.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}

	id, alloc, err := e.machineAt(addr)
	if err != nil {
		s.metrics.events.WithLabelValues("refused").Inc()
		s.opts.Logger.Warn("install event refused", zap.String("remote", addr), zap.Error(err))

		return nil, grpcstatus.Error(codes.PermissionDenied, err.Error())
	}

	if err = s.opts.Installs.RecordInstalled(ctx, id, alloc, "event-sink"); err != nil {
		return nil, grpcstatus.Errorf(codes.Unavailable, "error recording the install: %v", err)
	}

	s.metrics.events.WithLabelValues("installed").Inc()

	return &events.EventResponse{}, nil
}

// machineAt finds the machine booting Talos from addr: events are accepted only from the
// address a machine fetched its Talos boot script from, or its config with the token of
// its allocation, while it is allocated.
func (e *eventSink) machineAt(addr string) (resource.ID, string, error) {
	view := e.server.opts.View

	for _, m := range view.ByAddress(addr) {
		if alloc, ok := bootingTalos(m); ok {
			return m.ID, alloc, nil
		}
	}

	if t, ok := view.TalosAt(addr); ok {
		if m := view.Get(t.Machine); m != nil {
			if alloc, ok := bootingTalos(m); ok && alloc == t.Allocation {
				return m.ID, alloc, nil
			}
		}
	}

	return "", "", fmt.Errorf("no allocated machine booted Talos from %s", addr)
}

// bootingTalos returns the allocation of a machine the boot services last sent to Talos,
// reporting false for one that is not (or no longer) allocated.
func bootingTalos(m *machineview.Entry) (string, bool) {
	if m.Machine == nil || m.Machine.LastDecision != string(lifecycle.BootTalos) || m.Intent == nil || m.Intent.Allocation == nil {
		return "", false
	}

	return m.Intent.Allocation.ID, true
}
