package maintenance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Port is Talos' API port (apid's): Omni and talosctl add it to the machine's
// address.
const Port = constants.ApidPort

// stopGrace is how long a stopping server lets calls in flight finish before it cuts
// them.
const stopGrace = 2 * time.Second

// Options configure the maintenance API.
type Options struct {
	// AgentVersion is the agent's version, reported as Version's SHA and as the
	// metal-agent extension's version.
	AgentVersion string
	// ProcRoot is where procfs is mounted (default /proc), for the boot ID.
	ProcRoot string
	// Talos, when set, serves the machine as Talos rather than the agent.
	Talos  *Talos
	Logger *zap.Logger
}

// Server is the agent's Talos-compatible maintenance API: Talos' COSI state API
// (read-only) over the agent's state, and the MachineService methods Omni calls.
type Server struct {
	st      state.State
	machine *machineService
	talos   *Talos
	logger  *zap.Logger
}

// New returns the maintenance API over st, the agent's state as inventory.NewState
// makes it. It registers Definitions in st and writes the machine status
// (maintenance, ready) and the metal-agent extension status there: what the API
// says of the machine is true once it is served.
func New(ctx context.Context, st state.State, opts Options) (*Server, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}

	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	if err := publish(ctx, st, opts.AgentVersion, opts.Talos); err != nil {
		return nil, err
	}

	return &Server{
		st:      st,
		machine: &machineService{agentVersion: opts.AgentVersion, procRoot: opts.ProcRoot, talos: opts.Talos, logger: opts.Logger},
		talos:   opts.Talos,
		logger:  opts.Logger,
	}, nil
}

// Serve serves the API on lis over TLS, with a certificate made now for lis's
// address, until ctx is done; then it stops and returns nil. It closes lis. An
// error means the listener failed: the caller may listen again and call Serve again.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	creds, err := s.tlsConfig(listenerAddr(lis))
	if err != nil {
		lis.Close()

		return err
	}

	// Ends the streams when the server stops: Omni's watches never end on their own,
	// and a graceful stop waits for them.
	stopping, endStreams := context.WithCancel(context.Background())
	defer endStreams()

	srv := s.newGRPC(stopping, creds)

	s.logger.Info("serving the maintenance API", zap.Stringer("address", lis.Addr()))

	served := make(chan error, 1)

	go func() { served <- srv.Serve(lis) }()

	select {
	case <-ctx.Done():
		endStreams()
		stop(srv)

		// A stopped server's Serve returns nil, or ErrServerStopped when the stop came
		// first; anything else is a listener that failed as it stopped, not the
		// caller's business any more.
		if err = <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Warn("the maintenance API's listener failed as the API stopped", zap.Error(err))
		}

		return nil
	case err = <-served:
		srv.Stop()

		return fmt.Errorf("error serving the maintenance API on %s: %w", lis.Addr(), err)
	}
}

// newGRPC returns a gRPC server with the two services, whose streams end when
// stopping does. Keepalive is gRPC's default: Omni's clients ping every 320 s, above
// the 5 minutes the default lets a client ping. Stopping waits for the handlers, so
// none outlives Serve.
func (s *Server) newGRPC(stopping context.Context, creds *tls.Config) *grpc.Server {
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(creds)),
		grpc.WaitForHandlers(true),
		grpc.ChainUnaryInterceptor(recoverUnary(s.logger), logUnary(s.logger)),
		grpc.ChainStreamInterceptor(recoverStream(s.logger), logStream(s.logger), endStreamsOn(stopping)),
	)

	v1alpha1.RegisterStateServer(srv, newStateServer(s.st))
	machine.RegisterMachineServiceServer(srv, s.machine)

	return srv
}

// tlsConfig is the server's TLS for addrs: Talos' own where it has one, else a fresh
// self-signed certificate and no client certificate asked for.
func (s *Server) tlsConfig(addrs []netip.Addr) (*tls.Config, error) {
	if s.talos != nil && s.talos.TLS != nil {
		return s.talos.TLS(addrs)
	}

	cert, err := selfSigned(addrs, time.Now())
	if err != nil {
		return nil, err
	}

	return tlsConfig(cert), nil
}

// stop stops srv gracefully, letting calls in flight finish, then forcibly after
// stopGrace.
func stop(srv *grpc.Server) {
	done := make(chan struct{})

	go func() {
		srv.GracefulStop()
		close(done)
	}()

	select {
	case <-done:
	case <-time.After(stopGrace):
		srv.Stop()
		<-done
	}
}

// Listen binds the API's port on addr, which must be the machine's SideroLink
// address, and on nothing else. The API answers without authentication (Omni
// sends no client certificate to a machine in maintenance) and tells a caller the
// machine's hardware and addresses, so only the tunnel, whose one peer is Omni, may
// reach it: real Talos with a SideroLink config listens there only too. The address
// must be on a link already; on WireGuard and TUN links the kernel does no duplicate
// address detection, so it is usable as soon as it is added.
func Listen(ctx context.Context, addr netip.Addr) (net.Listener, error) {
	if !addr.IsValid() || addr.IsUnspecified() {
		return nil, fmt.Errorf("the maintenance API needs the SideroLink address to listen on, not %q", addr)
	}

	var lc net.ListenConfig

	lis, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(addr, Port).String())
	if err != nil {
		return nil, fmt.Errorf("error listening for the maintenance API: %w", err)
	}

	return lis, nil
}

// recoverUnary and recoverStream turn a panic in a handler into an Internal error:
// the agent is PID 1, and a panic there takes the kernel down with it.
func recoverUnary(logger *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				logger.Error("maintenance API call panicked", zap.String("method", info.FullMethod), zap.Any("panic", p), zap.Stack("stack"))

				resp, err = nil, status.Errorf(codes.Internal, "internal error in %s", info.FullMethod)
			}
		}()

		return handler(ctx, req)
	}
}

func recoverStream(logger *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				logger.Error("maintenance API call panicked", zap.String("method", info.FullMethod), zap.Any("panic", p), zap.Stack("stack"))

				err = status.Errorf(codes.Internal, "internal error in %s", info.FullMethod)
			}
		}()

		return handler(srv, ss)
	}
}

// endStreamsOn gives each stream a context that also ends when stopping does.
func endStreamsOn(stopping context.Context) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()

		defer context.AfterFunc(stopping, cancel)()

		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

// stream is a server stream with its own context.
type stream struct {
	grpc.ServerStream

	// ctx is what Context returns, as in grpc's own stream wrappers.
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// logUnary and logStream log each call at debug level: which client asked what, and
// how it was answered.
func logUnary(logger *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)

		logCall(ctx, logger, info.FullMethod, start, err)

		return resp, err
	}
}

func logStream(logger *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)

		logCall(ss.Context(), logger, info.FullMethod, start, err)

		return err
	}
}

// quotesRequest are the methods whose errors may quote what the caller sent.
var quotesRequest = map[string]bool{
	machine.MachineService_ApplyConfiguration_FullMethodName: true,
}

func logCall(ctx context.Context, logger *zap.Logger, method string, start time.Time, err error) {
	fields := []zap.Field{
		zap.String("method", method),
		zap.Stringer("code", status.Code(err)),
		zap.Duration("duration", time.Since(start)),
	}

	if p, ok := peer.FromContext(ctx); ok {
		fields = append(fields, zap.Stringer("peer", p.Addr))
	}

	// A config's loader and validator quote it in their errors (an unknown key with its
	// value): the answer goes to the caller, who sent it, never to the log.
	if err != nil && !errors.Is(err, context.Canceled) && !quotesRequest[method] {
		fields = append(fields, zap.String("error", status.Convert(err).Message()))
	}

	logger.Debug("maintenance API call", fields...)
}
