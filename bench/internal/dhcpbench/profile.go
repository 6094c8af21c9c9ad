package dhcpbench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/anvil-metal/anvil/bench/internal/profile"
	"github.com/anvil-metal/anvil/internal/netns"
)

// pprofPort is where the profiling provider serves pprof, on the server namespace's own
// address: nothing else listens in that namespace.
const pprofPort = "16061"

// profiler profiles the provider inside the server namespace, where the bench process
// reaches it by dialing from a thread in that namespace.
type profiler struct {
	bin, addr, path string
	ns              string
	captured        bool
}

func newProfiler(ctx context.Context, cfg Config, pair *nsPair) (*profiler, error) {
	bin, err := profile.BuildProvider(ctx, cfg.Repo, cfg.WorkDir)
	if err != nil {
		return nil, err
	}

	return &profiler{
		bin: bin, addr: net.JoinHostPort(pair.serverAddr, pprofPort),
		path: filepath.Join(cfg.WorkDir, "anvil-cpu.prof"), ns: pair.server,
	}, nil
}

// capture takes a CPU profile of d.
func (p *profiler) capture(ctx context.Context, d time.Duration) error {
	transport := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn

			err := netns.Do(p.ns, func() error {
				var err error

				conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)

				return err
			})
			if err != nil {
				return nil, fmt.Errorf("error dialing pprof in %s: %w", p.ns, err)
			}

			return conn, nil
		},
	}
	defer transport.CloseIdleConnections()

	if err := profile.CaptureWith(ctx, &http.Client{Transport: transport}, p.addr, d, p.path); err != nil {
		return err
	}

	p.captured = true

	return nil
}
