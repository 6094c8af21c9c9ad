package control

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// DefaultSocketPath is where the provider serves the control API unless told otherwise.
const DefaultSocketPath = "/var/lib/anvil/control.sock"

// Message size limits: a request carries at most a 1 MiB machine config; a reply carries
// one resource at a time (List streams), the largest an intent with its config.
const (
	maxRecvMsgSize = MaxConfigSize + 1<<20
	maxSendMsgSize = 4 << 20
)

// stopTimeout bounds the graceful stop: watches never end on their own.
const stopTimeout = 5 * time.Second

// Options configure the control server.
type Options struct {
	// SocketPath is the Unix socket to serve on (DefaultSocketPath when empty).
	SocketPath string
	// TCPAddress and TLSConfig serve the API over TCP+TLS as well; both are required for
	// it. Who may connect is the TLS config's business (client certificates).
	TCPAddress string
	TLSConfig  *tls.Config
	// ImageCache is the provider's boot-asset cache; without one the image cache calls
	// answer Unavailable.
	ImageCache ImageCache
	// StateBackup takes the online backups BackupState streams; without one it answers
	// Unavailable.
	StateBackup StateBackup
	Logger      *zap.Logger
}

// Server serves the control API.
type Server struct {
	opts        Options
	state       state.State
	transitions *Transitions
	logger      *zap.Logger
}

// New builds the control server over the provider's state: the state API on a read-only
// view, and the transition service over svc.
func New(st state.State, svc *transitions.Service, opts Options) *Server {
	if opts.SocketPath == "" {
		opts.SocketPath = DefaultSocketPath
	}

	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}

	return &Server{
		opts:        opts,
		state:       ReadOnly(st),
		transitions: NewTransitions(svc),
		logger:      opts.Logger,
	}
}

// newGRPC returns a gRPC server with both services. The Unix socket and TCP get one each
// because TLS credentials apply to a whole server.
func (s *Server) newGRPC(extra ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.MaxSendMsgSize(maxSendMsgSize),
		grpc.ChainUnaryInterceptor(logUnary(s.logger)),
		// Long-lived clients (the Cluster API manager's watch) ping an idle connection to
		// find a half-open one; allow them, at the client's pace.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, extra...)...)

	v1alpha1.RegisterStateServer(srv, server.NewState(s.state))
	controlv1.RegisterTransitionServiceServer(srv, s.transitions)
	controlv1.RegisterImageCacheServiceServer(srv, NewImageCacheService(s.opts.ImageCache))
	controlv1.RegisterStateServiceServer(srv, NewStateService(s.opts.StateBackup, s.logger))

	return srv
}

type served struct {
	srv  *grpc.Server
	lis  net.Listener
	name string
}

// Run serves until ctx is canceled, then stops gracefully and removes the socket.
func (s *Server) Run(ctx context.Context) error {
	unixLis, err := listenUnix(s.opts.SocketPath)
	if err != nil {
		return err
	}

	defer os.Remove(s.opts.SocketPath)

	servers := []served{{srv: s.newGRPC(), lis: unixLis, name: s.opts.SocketPath}}

	if s.opts.TCPAddress != "" && s.opts.TLSConfig != nil {
		tcpLis, err := net.Listen("tcp", s.opts.TCPAddress)
		if err != nil {
			unixLis.Close()

			return fmt.Errorf("error listening on %s: %w", s.opts.TCPAddress, err)
		}

		servers = append(servers, served{srv: s.newGRPC(grpc.Creds(credentials.NewTLS(s.opts.TLSConfig))), lis: tcpLis, name: tcpLis.Addr().String()})
	}

	errCh := make(chan error, len(servers))

	for _, sv := range servers {
		// The socket was renamed into place: its listener knows only the temporary name.
		s.logger.Info("serving control API", zap.String("address", sv.name))

		go func() {
			if err := sv.srv.Serve(sv.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errCh <- fmt.Errorf("error serving control API on %s: %w", sv.lis.Addr(), err)

				return
			}

			errCh <- nil
		}()
	}

	var runErr error

	// A failing listener stops the others too: the API is served whole or not at all.
	select {
	case <-ctx.Done():
	case runErr = <-errCh:
	}

	for _, sv := range servers {
		stop(sv.srv)
	}

	return runErr
}

// stop stops srv gracefully, then forcibly: watches never end on their own.
func stop(srv *grpc.Server) {
	done := make(chan struct{})

	go func() {
		srv.GracefulStop()
		close(done)
	}()

	select {
	case <-done:
	case <-time.After(stopTimeout):
		srv.Stop()
	}
}

// listenUnix listens on path with mode 0600. The socket is created under a temporary name
// and renamed into place, so it is never reachable with a wider mode; a stale socket
// from a crashed provider is replaced, but a live one or any other file is not.
func listenUnix(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("error creating the control socket directory: %w", err)
	}

	switch fi, err := os.Lstat(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("error checking %s: %w", path, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("%s exists and is not a socket", path)
	default:
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()

			return nil, fmt.Errorf("%s is in use: is another provider running?", path)
		}
	}

	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	os.Remove(tmp)

	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("error listening on %s: %w", path, err)
	}

	// Run removes the socket under its final name; the listener only knows the temporary one.
	lis.SetUnlinkOnClose(false)

	if err = os.Chmod(tmp, 0o600); err == nil {
		err = os.Rename(tmp, path)
	}

	if err != nil {
		lis.Close()
		os.Remove(tmp)

		return nil, fmt.Errorf("error setting up the control socket %s: %w", path, err)
	}

	return lis, nil
}

// logUnary logs each call's method, machine and outcome; never its request, which may
// carry a machine config.
func logUnary(logger *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)

		fields := []zap.Field{
			zap.String("method", info.FullMethod),
			zap.Stringer("code", status.Code(err)),
			zap.Duration("duration", time.Since(start)),
		}

		if m, ok := req.(interface{ GetMachineId() string }); ok {
			fields = append(fields, zap.String("machine", m.GetMachineId()))
		}

		if err != nil {
			fields = append(fields, zap.String("error", status.Convert(err).Message()))
		}

		logger.Debug("control call", fields...)

		return resp, err
	}
}
