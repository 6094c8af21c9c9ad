// Package omnilink is the provider's end of its link to Omni: it runs the Omni adapter
// (provider/cmd/omni-adapter, the process that speaks to Omni with Omni's own client) as
// a child, and serves it the adapter API on a Unix socket of the state directory. What
// the adapter says (Omni's join config, …) reaches the provider's services from here.
//
// The adapter is a process of its own so that the provider does not link Omni's client,
// whose dependencies (Kubernetes' and Talos' configuration types among them) cost tens
// of megabytes of memory in every process that links them, standalone or not.
package omnilink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	omniadapterv1 "github.com/anvil-metal/anvil/api/omniadapter/v1"
	"github.com/anvil-metal/anvil/internal/bootparams"
	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// Limits on what the adapter may send.
const (
	maxJoinArgs       = 16
	maxJoinArgSize    = 4096
	maxJoinConfigSize = 64 << 10
)

// Link is the provider's end of the link.
type Link struct {
	omniadapterv1.UnimplementedOmniAdapterServiceServer

	socket string
	// st holds the OmniMachines the adapter reports, of which the link is the only
	// writer.
	st     state.State
	bmcs   BMCSetter
	lag    *SyncLag
	logger *zap.Logger
	// shared: the join config goes through the state (OmniJoin) to every replica.
	shared bool

	mu         sync.RWMutex
	joinArgs   []string
	joinConfig string
	// fenced, while Serve runs for a term of leadership (ServeFenced), is the state the
	// link writes through: a deposed leader's late writes are refused.
	fenced state.State
}

// writer is the state the link writes through.
func (l *Link) writer() state.State {
	l.mu.RLock()
	defer l.mu.RUnlock()

	if l.fenced != nil {
		return l.fenced
	}

	return l.st
}

// ServeFenced serves the adapter API, as Serve, writing what the adapter says through st
// (a leader's fenced state) until ctx is done.
func (l *Link) ServeFenced(ctx context.Context, st state.State) error {
	l.mu.Lock()
	l.fenced = st
	l.mu.Unlock()

	defer func() {
		l.mu.Lock()
		l.fenced = nil
		l.mu.Unlock()
	}()

	return l.Serve(ctx)
}

// BMCSetter stores how to reach a machine's BMC as a person gave it (the transitions).
type BMCSetter interface {
	SetBMC(ctx context.Context, id string, bmc transitions.BMC) (power.Endpoint, error)
}

// Options configure the link.
type Options struct {
	// Socket is where the adapter API is served.
	Socket string
	// State holds what the adapter reports of machines; nil keeps nothing (the
	// machines' calls are refused).
	State state.State
	// BMCs takes the BMCs admins give in Omni; nil refuses them.
	BMCs BMCSetter
	// Lag, when set, hears of each change of Omni's view of a machine stored, to time
	// how long it takes to be carried out.
	Lag    *SyncLag
	Logger *zap.Logger
	// Shared stores the join config the adapter says in the state (OmniJoin) for the
	// site's other replicas, whose links keep it from there (Follow): only the leader
	// runs the adapter, every replica boots machines into Omni. Needs State.
	Shared bool
}

// New returns the link.
func New(opts Options) *Link {
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}

	return &Link{socket: opts.Socket, st: opts.State, bmcs: opts.BMCs, lag: opts.Lag, logger: logger, shared: opts.Shared && opts.State != nil}
}

// Socket is where the adapter API is served.
func (l *Link) Socket() string { return l.socket }

// JoinArgs returns the kernel args that make a machine join Omni over SideroLink, and
// false until the adapter has said them.
func (l *Link) JoinArgs() ([]string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()

	return slices.Clone(l.joinArgs), l.joinArgs != nil
}

// JoinConfig returns the join config documents (Talos machine configuration) Talos is
// served in Omni mode, and false until the adapter has said them.
func (l *Link) JoinConfig() (string, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()

	return l.joinConfig, l.joinConfig != ""
}

// SetJoinConfig implements omniadapterv1.OmniAdapterServiceServer.
func (l *Link) SetJoinConfig(ctx context.Context, req *omniadapterv1.SetJoinConfigRequest) (*omniadapterv1.SetJoinConfigResponse, error) {
	args := req.GetKernelArgs()

	if err := validateJoinArgs(args); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if len(req.GetConfig()) > maxJoinConfigSize {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("the join config documents are longer than %d bytes", maxJoinConfigSize))
	}

	if args == nil {
		args = []string{}
	}

	if l.shared {
		// Stored first: the adapter says it again should the site not have it.
		if err := safe.StateModify(ctx, l.writer(), resources.NewOmniJoin(), func(j *resources.OmniJoin) error {
			j.TypedSpec().KernelArgs, j.TypedSpec().Config = slices.Clone(args), req.GetConfig()

			return nil
		}); err != nil {
			return nil, status.Errorf(codes.Unavailable, "error storing the join config for the site: %v", err)
		}
	}

	l.setJoin(args, req.GetConfig())

	return &omniadapterv1.SetJoinConfigResponse{}, nil
}

// setJoin keeps the join config in memory, logging a change.
func (l *Link) setJoin(args []string, config string) {
	l.mu.Lock()
	changed := !slices.Equal(l.joinArgs, args)
	l.joinArgs = slices.Clone(args)
	l.joinConfig = config
	l.mu.Unlock()

	if changed {
		l.logger.Info("Omni's join config", zap.Strings("kernel_args", Redact(args)))
	}
}

// followRetry is the wait before following the stored join config again after a
// failed watch (a replica cut off from etcd).
const followRetry = 2 * time.Second

// Follow keeps the join config the site's leader stored (OmniJoin) until ctx is done;
// a link that is not shared has nothing to follow.
func (l *Link) Follow(ctx context.Context) error {
	if !l.shared {
		return nil
	}

	for {
		err := l.follow(ctx)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping is not a failure
		}

		l.logger.Warn("following the site's Omni join config failed: following it again", zap.Error(err))

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followRetry):
		}
	}
}

func (l *Link) follow(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	events := make(chan safe.WrappedStateEvent[*resources.OmniJoin])

	if err := safe.StateWatch(ctx, l.st, resources.NewOmniJoin().Metadata(), events); err != nil {
		return fmt.Errorf("error watching the join config: %w", err)
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			switch ev.Type() {
			case state.Created, state.Updated:
				j, err := ev.Resource()
				if err != nil {
					return err
				}

				// What another replica stored is checked as what an adapter says.
				if err = validateJoinArgs(j.TypedSpec().KernelArgs); err != nil || len(j.TypedSpec().Config) > maxJoinConfigSize {
					l.logger.Warn("the site's stored join config is not valid: ignored", zap.Error(err))

					continue
				}

				l.setJoin(j.TypedSpec().KernelArgs, j.TypedSpec().Config)
			case state.Errored:
				return ev.Error()
			case state.Destroyed, state.Bootstrapped, state.Noop:
			}
		}
	}
}

// validateJoinArgs checks that each arg is one word an iPXE kernel line can carry.
func validateJoinArgs(args []string) error {
	if len(args) > maxJoinArgs {
		return fmt.Errorf("%d join kernel args, at most %d", len(args), maxJoinArgs)
	}

	for i, arg := range args {
		switch {
		case arg == "":
			return fmt.Errorf("join kernel arg %d is empty", i)
		case len(arg) > maxJoinArgSize:
			return fmt.Errorf("join kernel arg %d is longer than %d bytes", i, maxJoinArgSize)
		case strings.ContainsFunc(arg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			return fmt.Errorf("join kernel arg %d has a space or a control character", i)
		}
	}

	return nil
}

// Serve serves the adapter API on the socket (mode 0600) until ctx is done.
func (l *Link) Serve(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(l.socket), 0o700); err != nil {
		return fmt.Errorf("error creating the adapter socket's directory: %w", err)
	}

	_ = os.Remove(l.socket) // a stale socket of a provider that died

	lis, err := net.Listen("unix", l.socket)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", l.socket, err)
	}

	if err = os.Chmod(l.socket, 0o600); err != nil {
		lis.Close()

		return fmt.Errorf("error setting the mode of %s: %w", l.socket, err)
	}

	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxJoinArgs*(maxJoinArgSize+16) + maxJoinConfigSize))
	omniadapterv1.RegisterOmniAdapterServiceServer(srv, l)

	errc := make(chan error, 1)

	go func() { errc <- srv.Serve(lis) }()

	select {
	case <-ctx.Done():
		srv.Stop()
		<-errc //nolint:errcheck // stopped as asked: Serve's ErrServerStopped

		return nil
	case err = <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}

		return fmt.Errorf("error serving the adapter API: %w", err)
	}
}

// Redact hides the join token, and any other secret, in kernel args, for logs: the
// token lets a machine join (bootparams.Redact).
func Redact(args []string) []string {
	out := make([]string, 0, len(args))

	for _, a := range args {
		out = append(out, bootparams.Redact(a))
	}

	return out
}
