//go:build lab

package manager_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/anvil-metal/anvil/internal/kubetest"
	"github.com/anvil-metal/anvil/provider/internal/capi/anvilclient"
	"github.com/anvil-metal/anvil/provider/internal/capi/manager"
	"github.com/anvil-metal/anvil/provider/internal/controlclient"
)

// startAPIServer runs a real kube-apiserver with Cluster API's CRDs and ours.
func startAPIServer(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()

	cfg := kubetest.Start(t, kubetest.CRDs(t)...)

	scheme, err := manager.Scheme()
	require.NoError(t, err)

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	return cfg, c
}

// runningManager is one manager, started and stopped by the test.
type runningManager struct {
	t    *testing.T
	stop context.CancelFunc
	done chan error
}

// startManager runs a manager against the API server and the control socket until stop
// or the test's end.
func startManager(t *testing.T, cfg *rest.Config, socket string) *runningManager {
	t.Helper()

	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(testWriter{t})))

	scheme, err := manager.Scheme()
	require.NoError(t, err)

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Several managers run at once in the race: each is its own controller.
		Controller: controllerConfig(),
	})
	require.NoError(t, err)

	conn, err := controlclient.Dial(controlclient.Options{Endpoint: "unix://" + socket})
	require.NoError(t, err)

	anvil := anvilclient.New(controlclient.State(conn), controlclient.Transitions(conn))

	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, manager.Setup(ctx, mgr, anvil, talosVersion))

	m := &runningManager{t: t, stop: cancel, done: make(chan error, 1)}

	go func() {
		m.done <- mgr.Start(ctx)
		conn.Close()
	}()

	t.Cleanup(m.halt)

	return m
}

// halt stops the manager and waits for it; stopping twice is stopping once.
func (m *runningManager) halt() {
	m.stop()

	if m.done != nil {
		if err := <-m.done; err != nil {
			m.t.Errorf("the manager failed: %v", err)
		}

		m.done = nil
	}
}

// managerLog keeps every manager's log, for the tests that check what was logged.
var managerLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func managerLogged() string {
	managerLog.mu.Lock()
	defer managerLog.mu.Unlock()

	return managerLog.buf.String()
}

// testWriter sends the managers' log to the test's, and to managerLog.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	managerLog.mu.Lock()
	managerLog.buf.Write(p)
	managerLog.mu.Unlock()

	w.t.Log(strings.TrimRight(string(p), "\n"))

	return len(p), nil
}
