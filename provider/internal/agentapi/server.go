// Package agentapi is the gRPC service agents dial: a session per agent, which says who
// it is with its per-boot token, reports its inventory and the outcome of orders, and
// receives the orders the machine's state calls for.
package agentapi

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/resourcewire"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/inventory"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
	"github.com/anvil-metal/anvil/provider/internal/untrusted"
)

// Limits on what an agent may send.
const (
	MaxMessageSize = 4 << 20
	helloTimeout   = 30 * time.Second
	// handshakeTimeout bounds a connection's TLS handshake and HTTP/2 preface (gRPC's
	// default is 120 s): a half-open connection must not hold its goroutine for minutes.
	handshakeTimeout = 20 * time.Second
	// idleTimeout closes a connection with no session on it: an agent keeps one open
	// while connected, so only a client that holds connections without using them loses
	// its own.
	idleTimeout = time.Minute
	// connBuffer is each agent connection's gRPC write buffer (pooled by gRPC between
	// writes).
	connBuffer = 4 << 10
)

// Recorder stores what agents report.
type Recorder interface {
	RecordWiped(ctx context.Context, machineID string, wipe resources.WipeRecord) error
	RecordInventory(ctx context.Context, machineID string, spec resources.MachineInventorySpec) error
	RecordBMC(ctx context.Context, machineID string, report BMCReport) error
	// The kexec handoff of an allocation: ordered (before the order is sent), loaded
	// (the agent jumps next) or failed, with why.
	RecordKexecOrdered(ctx context.Context, machineID, allocationID string) error
	RecordKexecLoaded(ctx context.Context, machineID, allocationID string) error
	RecordKexecFailed(ctx context.Context, machineID, allocationID, why string) error
}

// KexecTargets give what an agent kexecs into to boot an allocation's Talos: the
// provider's URLs of the kernel and initramfs, their digests, and the cmdline the iPXE
// path would have given. KexecTarget may take a while (a download from the Image Factory).
type KexecTargets interface {
	KexecTarget(ctx context.Context, machineID, arch string, alloc *resources.Allocation) (*agentv1.Kexec, error)
}

// BMCReport is an agent's answer to a BMC provisioning order.
type BMCReport struct {
	Order string
	// What the agent set and read: the BMC's LAN address and port, the user and its
	// password (secret: never logged).
	Address  string
	Port     uint32
	User     string
	Password string
	// Failure is why the order failed; "" when it was carried out.
	Failure string
}

// Options configure the server.
type Options struct {
	View *machineview.View
	// Tokens verifies the agents' tokens: the Signer that signed them, made at start.
	Tokens *token.Signer
	// TokenKey, when Tokens is nil, is what New makes one from (for tests).
	TokenKey []byte
	// Policy is what the operator chose of every machine (the lifecycle's rules read it).
	Policy lifecycle.Policy
	// BMCPassword gives the password a machine's agent sets on its BMC when it provisions
	// the provider's user (Policy.ProvisionBMC).
	BMCPassword func(machineID string) string
	Recorder    Recorder
	// EKs records the TPM EK a machine's agent proved at its first registration with one
	// (identity.go); nil records none.
	EKs EKRecorder
	// Observations receives agent registrations, so a machine whose PXE boot was not
	// recorded becomes known when its agent says hello, and kexec handoffs, so that
	// Talos booted by one is known at its address as a PXE-booted one is.
	Observations chan<- controllers.PXEObservation
	// Kexec gives kexec orders their targets; nil when the provider has none (the
	// policy then never asks for a kexec).
	Kexec KexecTargets
	// Trace, when set, marks agents registering and kexec handoffs on the machines'
	// boot timelines, with the kexec orders' fate among their events.
	Trace *boottrace.Recorder
	// Tamper raises security events: reports no order asked for, superseded tokens
	// presented again, identities that do not match; nil raises none.
	Tamper   *tamper.Reporter
	Registry prometheus.Registerer
	Logger   *zap.Logger
}

// Server implements agentv1.AgentServiceServer.
type Server struct {
	agentv1.UnimplementedAgentServiceServer

	opts    Options
	metrics *metrics
	changes *machineChanges
	conns   *connTracker
}

// New returns the server.
func New(opts Options) *Server {
	if opts.Tokens == nil {
		opts.Tokens = token.NewSigner(opts.TokenKey)
	}

	return &Server{opts: opts, metrics: newMetrics(opts.Registry), changes: newMachineChanges(opts.View), conns: newConnTracker(opts.Registry)}
}

// GRPCServer returns a gRPC server with the agent service, with the limits agents get;
// serve it on Listener for the per-connection ones (conns.go).
func (s *Server) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize), grpc.ConnectionTimeout(handshakeTimeout),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout}),
		// An agent's connection idles but for a few small messages: gRPC's 32 KiB read and
		// write buffers per connection were most of the provider's memory with 10,000
		// agents connected (bench fleet). No read buffer at all: the TLS connection below
		// holds the record it decrypted already, and a buffer per connection, held for the
		// session's life, was 49 MB of 10,000 sessions' heap.
		grpc.ReadBufferSize(0), grpc.WriteBufferSize(connBuffer),
	}, opts...)...)
	agentv1.RegisterAgentServiceServer(srv, s)

	return srv
}

// Session implements agentv1.AgentServiceServer.
func (s *Server) Session(stream agentv1.AgentService_SessionServer) error {
	ctx := stream.Context()

	conn := s.conns.of(ctx)
	if err := conn.openSession(); err != nil {
		return err
	}

	hello, err := s.hello(stream)
	if err != nil {
		return err
	}

	// The machine proves its TPM identity before it is welcome (identity.go).
	if err = s.prove(stream, hello); err != nil {
		return err
	}

	defer conn.helloed()()

	id := hello.GetMachineId()
	logger := s.opts.Logger.With(zap.String("machine", id), untrusted.String("boot", hello.GetBootId()))

	s.register(ctx, hello)
	s.metrics.sessionsTotal.Inc()
	s.markRegistered(id)

	if err = stream.Send(&agentv1.ProviderMessage{Message: &agentv1.ProviderMessage_Welcome{Welcome: &agentv1.Welcome{MachineId: id}}}); err != nil {
		return err
	}

	s.metrics.sessions.Inc()
	defer s.metrics.sessions.Dec()

	// What the agent says of itself is bounded: a valid token is no bound on a hello's size.
	connected := []zap.Field{untrusted.String("version", hello.GetAgentVersion()), untrusted.Strings("macs", hello.GetMacs())}
	if why := hello.GetKexecUnavailable(); why != "" {
		connected = append(connected, zap.String("kexec_unavailable", why))
	}

	logger.Info("agent connected", connected...)

	for _, result := range hello.GetResults() {
		if err = s.result(ctx, id, result, logger); err != nil {
			return err
		}
	}

	messages := make(chan *agentv1.AgentMessage)
	recvErr := make(chan error, 1)

	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err

				return
			}

			select {
			case messages <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()

	var (
		sentID string
		kexec  kexecPrep
	)

	defer kexec.stop()

	// Woken for this machine's changes alone, not every machine's (changes.go).
	sub := s.changes.subscribe(id)
	defer sub.close()

	for {
		changed := sub.changed()

		// Orders come from the view: one that may be stale gives none, and the agent
		// goes to a replica whose view is current.
		if err = s.opts.View.Serving(); err != nil {
			return status.Errorf(codes.Unavailable, "this provider replica does not serve: %v", err)
		}

		m := lifecycle.Machine{ID: id}
		if e := s.opts.View.Get(id); e != nil {
			m = *e
		}

		m = withAgent(m, hello)
		next := order(m, s.opts.Policy, hello, s.opts.BMCPassword)
		if k := next.GetKexec(); k != nil && next.GetId() != sentID {
			// The target is made ready first (its assets fetched); the order is recorded
			// before it is sent, so that the handoff's deadline runs from it.
			if next, err = s.kexecOrder(ctx, m, next, &kexec, logger); err != nil {
				return err
			}
		}

		if next != nil && next.GetId() != sentID {
			if err = stream.Send(&agentv1.ProviderMessage{Message: &agentv1.ProviderMessage_Order{Order: next}}); err != nil {
				return err
			}

			sentID = next.GetId()
			s.noteNoKexec(m, next, logger)
			// The metric has one label for both BMC orders: "bmc", as orderKinds lists it.
			kind := agentv1.OrderKind(next)
			if kind == agentv1.OrderKindGetBMC || kind == agentv1.OrderKindSetBMC {
				kind = "bmc"
			}

			s.metrics.orders.WithLabelValues(kind).Inc()
			logger.Info("order sent", zap.String("order", sentID))
		}

		select {
		case <-ctx.Done():
			return nil
		case err = <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				logger.Info("agent disconnected")

				return nil
			}

			logger.Info("agent session ended", zap.Error(err))

			return err
		case msg := <-messages:
			if err = s.message(ctx, hello, msg, logger); err != nil {
				return err
			}
		case <-changed:
		case <-kexec.ready():
		}
	}
}

// hello reads and checks the first message: the token must be this machine's, for its
// newest boot.
func (s *Server) hello(stream agentv1.AgentService_SessionServer) (*agentv1.Hello, error) {
	msg, err := recvWithin(stream, helloTimeout)

	switch {
	case errors.Is(err, errNoMessage):
		s.metrics.refused.WithLabelValues("timeout").Inc()

		return nil, status.Error(codes.DeadlineExceeded, "no hello")
	case err != nil:
		return nil, err
	}

	hello := msg.GetHello()
	if hello == nil {
		s.metrics.refused.WithLabelValues("protocol").Inc()

		return nil, status.Error(codes.InvalidArgument, "the first message must be a hello")
	}

	claims, err := s.opts.Tokens.Verify(hello.GetToken())
	if err != nil || claims.Kind != token.KindAgent || claims.MachineID != hello.GetMachineId() {
		s.metrics.refused.WithLabelValues("token").Inc()
		s.opts.Logger.Warn("agent refused: invalid token", untrusted.String("machine", hello.GetMachineId()), zap.String("remote", remote(stream.Context())))

		return nil, status.Error(codes.Unauthenticated, "invalid token")
	}

	if s.opts.View.AgentBootIssued(claims.MachineID).After(claims.Issued) {
		s.metrics.refused.WithLabelValues("superseded").Inc()
		s.opts.Logger.Warn("agent refused: token superseded by a newer boot", zap.String("machine", claims.MachineID))
		_ = s.opts.Tamper.Report(stream.Context(), tamper.Event{ // holds nothing: the error is the hold's
			Machine: claims.MachineID, Kind: tamper.TokenReplay, Remote: remote(stream.Context()),
			Detail: "an agent token superseded by a newer boot of the machine was presented",
		})

		return nil, status.Error(codes.Unauthenticated, "token superseded by a newer boot of this machine")
	}

	return hello, nil
}

// errNoMessage is recvWithin's error when the agent sent nothing in time.
var errNoMessage = errors.New("no message in time")

// recvWithin receives the session's next message, giving up after d: a client that says
// nothing must not hold the session. A receive given up on ends with the session.
func recvWithin(stream agentv1.AgentService_SessionServer, d time.Duration) (*agentv1.AgentMessage, error) {
	type received struct {
		msg *agentv1.AgentMessage
		err error
	}

	ch := make(chan received, 1)

	go func() {
		msg, err := stream.Recv()
		ch <- received{msg, err}
	}()

	timer := time.NewTimer(d)
	defer timer.Stop()

	select {
	case r := <-ch:
		return r.msg, r.err
	case <-timer.C:
		return nil, errNoMessage
	}
}

// register makes the machine known if its PXE boot was not recorded (or was not, past
// the bound on pending machines), and records that its agent registered. It waits for the
// controller to take the observation rather than drop it: with the boot's observation
// dropped too (the controller behind, 10,000 agents registering at once), the machine
// stayed unknown, its agent holding forever, never accepted (bench fleet: 3 of 10,000).
// The wait runs beside the session, not in its way, and ends with it.
func (s *Server) register(ctx context.Context, hello *agentv1.Hello) {
	if e := s.opts.View.Get(hello.GetMachineId()); e != nil && e.Machine != nil && !e.Machine.AgentRegistered.IsZero() {
		return
	}

	// Registered: a machine whose agent said hello is recorded past the bound on
	// pending machines, and never forgotten.
	obs := controllers.PXEObservation{MachineID: hello.GetMachineId(), Address: remote(ctx), Decision: "agent", At: time.Now(), Registered: true}

	// The MAC the agent names first, if it is one: it goes into the machine's record.
	if macs := hello.GetMacs(); len(macs) > 0 {
		if mac, err := net.ParseMAC(macs[0]); err == nil {
			obs.MAC = mac.String()
		}
	}

	go func() {
		select {
		case s.opts.Observations <- obs:
		case <-ctx.Done():
		}
	}()
}

func (s *Server) message(ctx context.Context, hello *agentv1.Hello, msg *agentv1.AgentMessage, logger *zap.Logger) error {
	id := hello.GetMachineId()

	switch m := msg.GetMessage().(type) {
	case *agentv1.AgentMessage_Inventory:
		resources, err := resourcewire.Decode(m.Inventory.GetResources())
		if err != nil {
			logger.Warn("malformed inventory", zap.Error(err))

			return status.Errorf(codes.InvalidArgument, "malformed inventory: %v", err)
		}

		spec := inventory.Summarize(resources)
		spec.ReportedAt = time.Now()
		spec.KexecUnavailable = hello.GetKexecUnavailable()

		if err = s.opts.Recorder.RecordInventory(ctx, id, spec); err != nil {
			return status.Errorf(codes.Unavailable, "error recording the inventory: %v", err)
		}
	case *agentv1.AgentMessage_Result:
		return s.result(ctx, id, m.Result, logger)
	default:
		return status.Error(codes.InvalidArgument, "unexpected message")
	}

	return nil
}

func (s *Server) result(ctx context.Context, id string, r *agentv1.OrderResult, logger *zap.Logger) error {
	logger.Info("order result", zap.String("order", r.GetOrderId()), zap.Stringer("status", r.GetStatus()), zap.String("message", r.GetMessage()))

	if r.GetOrderId() == lifecycle.BMCOrderID && (r.GetStatus() == agentv1.OrderResult_STATUS_DONE || r.GetStatus() == agentv1.OrderResult_STATUS_FAILED) {
		if !s.solicited(ctx, id, "BMC", s.bmcOwed(id)) {
			return nil
		}

		report := BMCReport{Order: r.GetOrderId()}

		if r.GetStatus() == agentv1.OrderResult_STATUS_FAILED {
			report.Failure = r.GetMessage()
			if report.Failure == "" {
				report.Failure = "failed"
			}
		} else if b := r.GetBmc(); b != nil {
			report.Address, report.Port, report.User, report.Password = b.GetAddress(), b.GetPort(), b.GetUser(), b.GetPassword()
		}

		if err := s.opts.Recorder.RecordBMC(ctx, id, report); err != nil {
			return status.Errorf(codes.Unavailable, "error recording the BMC: %v", err)
		}
	}

	if alloc, ok := strings.CutPrefix(r.GetOrderId(), kexecOrderPrefix); ok {
		if err := s.kexecResult(ctx, id, alloc, r); err != nil {
			return err
		}
	}

	if w := r.GetWipe(); w != nil && r.GetStatus() == agentv1.OrderResult_STATUS_DONE {
		record := resources.WipeRecord{ID: w.GetGenerationId(), At: time.Now()}

		for _, d := range w.GetDisks() {
			record.Disks = append(record.Disks, resources.DiskWiped{
				Device: d.GetDevice(), Method: d.GetMethod(), Bytes: d.GetBytes(), DurationMs: d.GetDurationMs(),
				Verified: d.GetVerified(), Skipped: d.GetSkipped(), Kept: d.GetKept(),
			})
		}

		// Read before the record changes what is owed.
		mode, owed := s.wipeOwed(id, record.ID)
		if !s.solicited(ctx, id, "wipe", s.wipeAnswer(id, record.ID, owed)) {
			return nil
		}

		if err := s.opts.Recorder.RecordWiped(ctx, id, record); err != nil {
			return status.Errorf(codes.Unavailable, "error recording the wipe: %v", err)
		}

		if owed {
			s.metrics.observeWipe(mode, record)
		}
	}

	return nil
}

// answer is how a report stands against the orders outstanding.
type answer int

const (
	// owedAnswer: the order is outstanding; record the report.
	owedAnswer answer = iota
	// repeatedAnswer: the report was recorded already (the agent sends its results again
	// in each session of a boot); nothing to do.
	repeatedAnswer
	// unsolicitedAnswer: no such order is outstanding: refused, and a security event.
	unsolicitedAnswer
)

// solicited says whether a report of what is to be recorded, raising a security event for
// an unsolicited one: a session with a valid token must not change what it was not asked
// (a BMC "provisioned" with no order sent would replace the user's BMC and stop in-band
// provisioning for good).
func (s *Server) solicited(ctx context.Context, id, what string, a answer) bool {
	if a != unsolicitedAnswer {
		return a == owedAnswer
	}

	s.metrics.refused.WithLabelValues("unsolicited").Inc()
	_ = s.opts.Tamper.Report(ctx, tamper.Event{ // holds nothing: the error is the hold's
		Machine: id, Kind: tamper.UnsolicitedReport, Remote: remote(ctx),
		Detail: "a " + what + " report no order asked for was refused",
	})

	return false
}

// bmcOwed is how a BMC report stands: owed while the machine's BMC provisioning is.
func (s *Server) bmcOwed(id string) answer {
	e := s.opts.View.Get(id)

	switch {
	case e == nil:
		return unsolicitedAnswer
	case e.BMCPending(s.opts.Policy):
		return owedAnswer
	case e.Status != nil && e.Status.BMCOrder == lifecycle.BMCOrderID:
		return repeatedAnswer
	default:
		return unsolicitedAnswer
	}
}

// wipeAnswer is how a wipe report of that generation stands.
func (s *Server) wipeAnswer(id, generation string, owed bool) answer {
	if owed {
		return owedAnswer
	}

	if e := s.opts.View.Get(id); e != nil && e.Status != nil && e.Status.WipedID == generation {
		return repeatedAnswer
	}

	return unsolicitedAnswer
}

func remote(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}

	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}

	return p.Addr.String()
}
