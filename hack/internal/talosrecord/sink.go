package talosrecord

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Sink is Talos' event sink (SideroLink's EventSinkService, what talos.events.sink= and
// an EventSinkConfig name): it keeps every event published, in order, each tagged with
// the step current when it arrived.
type Sink struct {
	events.UnimplementedEventSinkServiceServer

	mu      sync.Mutex
	step    string
	got     []received
	changed chan struct{}
}

type received struct {
	step string
	req  *events.EventRequest
}

// NewSink returns a sink whose first step is step.
func NewSink(step string) *Sink {
	return &Sink{step: step, changed: make(chan struct{})}
}

// Serve serves the sink on lis until ctx is done.
func (s *Sink) Serve(ctx context.Context, lis net.Listener) error {
	srv := grpc.NewServer()
	events.RegisterEventSinkServiceServer(srv, s)

	go func() {
		<-ctx.Done()
		srv.Stop()
	}()

	if err := srv.Serve(lis); err != nil {
		return fmt.Errorf("error serving the event sink: %w", err)
	}

	return nil
}

// Publish implements events.EventSinkServiceServer.
func (s *Sink) Publish(_ context.Context, req *events.EventRequest) (*events.EventResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.got = append(s.got, received{step: s.step, req: proto.CloneOf(req)})

	close(s.changed)
	s.changed = make(chan struct{})

	return &events.EventResponse{}, nil
}

// Step makes name the step the next events belong to.
func (s *Sink) Step(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.step = name
}

// Events returns the step's events as received.
func (s *Sink) Events(step string) []*events.EventRequest {
	s.mu.Lock()
	defer s.mu.Unlock()

	var reqs []*events.EventRequest

	for _, r := range s.got {
		if r.step == step {
			reqs = append(reqs, r.req)
		}
	}

	return reqs
}

// WaitFor waits until an event of the step satisfies ok, or ctx ends.
func (s *Sink) WaitFor(ctx context.Context, step string, ok func(summary string) bool) error {
	for {
		s.mu.Lock()
		changed := s.changed

		for _, r := range s.got {
			if r.step == step && ok(Summarize(r.req)) {
				s.mu.Unlock()

				return nil
			}
		}

		s.mu.Unlock()

		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for an event in step %q: %w", step, ctx.Err())
		case <-changed:
		}
	}
}

// NormalizeEvent is an event as the recording keeps it; resetActor is the actor ID the
// recorder's reset was answered with ("" before it).
func NormalizeEvent(req *events.EventRequest, resetActor string) Event {
	ev := Event{Summary: Summarize(req), Type: req.GetData().GetTypeUrl()}

	switch a := req.GetActorId(); a {
	case "":
	case resetActor:
		ev.Actor = "reset"
	default:
		ev.Actor = "other"
	}

	msg, err := req.GetData().UnmarshalNew()
	if err != nil {
		return ev
	}

	switch m := msg.(type) {
	case *machine.ServiceStateEvent:
		// Its message and health name PIDs, containers and moments: the service and
		// what happened to it are the event.
		ev.Data = map[string]any{"service": m.GetService(), "action": m.GetAction().String()}
	default:
		ev.Data = Normalize(msg)
	}

	return ev
}

// Summarize is an event in a line: "sequence install START", "sequence install NOOP
// error FATAL: …", "machine status MAINTENANCE ready=true", "phase …", "task …",
// "service …".
func Summarize(req *events.EventRequest) string {
	msg, err := req.GetData().UnmarshalNew()
	if err != nil {
		return "undecodable " + req.GetData().GetTypeUrl()
	}

	switch m := msg.(type) {
	case *machine.SequenceEvent:
		s := fmt.Sprintf("sequence %s %s", m.GetSequence(), m.GetAction())
		if e := m.GetError(); e != nil {
			s += fmt.Sprintf(" error %s: %s", e.GetCode(), e.GetMessage())
		}

		return s
	case *machine.PhaseEvent:
		return fmt.Sprintf("phase %s %s", m.GetPhase(), m.GetAction())
	case *machine.TaskEvent:
		return fmt.Sprintf("task %s %s", m.GetTask(), m.GetAction())
	case *machine.ServiceStateEvent:
		return fmt.Sprintf("service %s %s", m.GetService(), m.GetAction())
	case *machine.MachineStatusEvent:
		s := fmt.Sprintf("machine status %s ready=%t", m.GetStage(), m.GetStatus().GetReady())

		var unmet []string
		for _, c := range m.GetStatus().GetUnmetConditions() {
			unmet = append(unmet, c.GetName())
		}

		if len(unmet) > 0 {
			s += " unmet=" + strings.Join(unmet, ",")
		}

		return s
	case *machine.AddressEvent:
		return "addresses"
	case *machine.ConfigLoadErrorEvent:
		return "config load error: " + m.GetError()
	case *machine.ConfigValidationErrorEvent:
		return "config validation error: " + m.GetError()
	case *machine.RestartEvent:
		return fmt.Sprintf("restart %d", m.GetCmd())
	default:
		return string(msg.ProtoReflect().Descriptor().FullName())
	}
}
