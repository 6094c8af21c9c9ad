package siderolink

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	pb "github.com/siderolabs/siderolink/api/siderolink"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"google.golang.org/grpc"
)

// fakeProvision is Omni's Provision API: it records each request and answers with
// answer's response for the nth call (from 1).
type fakeProvision struct {
	pb.UnimplementedProvisionServiceServer

	answer func(n int, req *pb.ProvisionRequest) (*pb.ProvisionResponse, error)

	mu   sync.Mutex
	reqs []*pb.ProvisionRequest
}

func (f *fakeProvision) Provision(_ context.Context, req *pb.ProvisionRequest) (*pb.ProvisionResponse, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	n := len(f.reqs)
	f.mu.Unlock()

	return f.answer(n, req)
}

func (f *fakeProvision) requests() []*pb.ProvisionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()

	return append([]*pb.ProvisionRequest(nil), f.reqs...)
}

// startProvision serves f on a loopback port until the test ends, and returns the port's
// address.
func startProvision(t *testing.T, f *fakeProvision, opts ...grpc.ServerOption) string {
	t.Helper()

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)

	srv := grpc.NewServer(opts...)
	pb.RegisterProvisionServiceServer(srv, f)

	done := make(chan struct{})

	go func() {
		defer close(done)

		_ = srv.Serve(lis)
	}()

	t.Cleanup(func() {
		srv.Stop()
		<-done
	})

	return lis.Addr().String()
}

// response is a Provision response as Omni makes it.
func response(key wgtypes.Key, node string, endpoints ...string) *pb.ProvisionResponse {
	return &pb.ProvisionResponse{
		ServerEndpoint:    pb.MakeEndpoints(endpoints...),
		ServerPublicKey:   key.PublicKey().String(),
		NodeAddressPrefix: node,
		ServerAddress:     "fdae:41e4:649b:9303::1",
	}
}

// fakeClock is a clock the test advances; Run's one goroutine waits on at most one
// After at a time.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()

	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})

	return ch
}

// Advance moves the time on by d, firing what falls due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()

	c.now = c.now.Add(d)

	kept := c.waiters[:0]

	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)

			continue
		}

		w.ch <- c.now
	}

	c.waiters = kept
}

// waitSleeping waits (in real time) until Run sleeps on the clock, i.e. has done all it
// does before its next wait.
func (c *fakeClock) waitSleeping(t *testing.T) {
	t.Helper()

	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()

		return len(c.waiters) > 0
	}, 10*time.Second, time.Millisecond, "Run never came to wait")
}

// fakeTunnel records its configurations; the test sets its last handshake, loses its
// peer or fails its next configuration.
type fakeTunnel struct {
	mu           sync.Mutex
	configs      []tunnelConfig
	handshake    time.Time
	gone         bool
	configureErr error
	closed       bool
}

func (f *fakeTunnel) Configure(cfg tunnelConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()

	if err := f.configureErr; err != nil {
		f.configureErr = nil

		return err
	}

	f.configs = append(f.configs, cfg)
	f.gone = false

	return nil
}

func (f *fakeTunnel) LastHandshake(peer wgtypes.Key) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	if f.gone || len(f.configs) == 0 || f.configs[len(f.configs)-1].PeerKey != peer {
		return time.Time{}, errPeerGone
	}

	return f.handshake, nil
}

func (f *fakeTunnel) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()

	f.closed = true

	return nil
}

func (f *fakeTunnel) set(fn func(f *fakeTunnel)) {
	f.mu.Lock()
	defer f.mu.Unlock()

	fn(f)
}

func (f *fakeTunnel) last() tunnelConfig {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.configs[len(f.configs)-1]
}

// fakeOpener opens fakeTunnels, each sent on opened.
func fakeOpener(opened chan<- *fakeTunnel) opener {
	return func(_ context.Context, _ *zap.Logger, cfg tunnelConfig) (tunnel, error) {
		t := &fakeTunnel{}
		if err := t.Configure(cfg); err != nil {
			return nil, err
		}

		opened <- t

		return t, nil
	}
}

// recv takes the next value from ch, failing the test after a while.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()

	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)

		panic("unreachable")
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
