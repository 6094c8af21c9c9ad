// Package manager runs Anvil's Cluster API infrastructure provider: a controller-runtime
// manager whose controllers (MetalCluster, MetalMachine, Server) work through Anvil's
// control API, with its flags (each also read from ANVIL_<FLAG>).
package manager

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/anvil-metal/anvil/api/infrastructure/v1beta1"
	"github.com/anvil-metal/anvil/internal/flagenv"
	"github.com/anvil-metal/anvil/internal/talosversion"
	"github.com/anvil-metal/anvil/provider/internal/capi/anvilclient"
	"github.com/anvil-metal/anvil/provider/internal/capi/controllers"
	"github.com/anvil-metal/anvil/provider/internal/controlclient"
)

// Options configure the manager.
type Options struct {
	// Anvil is how to reach Anvil's control API.
	Anvil controlclient.Options
	// TalosVersion is the Talos of MetalMachines that name none.
	TalosVersion string
	// MetricsAddr and ProbeAddr are where metrics and health probes are served ("0"
	// turns metrics off).
	MetricsAddr, ProbeAddr string
	// LeaderElect has one manager of a Deployment's replicas work at a time.
	LeaderElect bool
	// LeaderElectionNamespace holds the lease (default: the pod's namespace).
	LeaderElectionNamespace string
	// Debug logs at debug level.
	Debug bool
}

// Flags registers the options' flags on fs.
func (o *Options) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Anvil.Endpoint, "anvil-endpoint", "unix:///var/lib/anvil/control.sock",
		"Anvil's control API: unix:///path/to/control.sock or tcp://host:port (TLS)")
	fs.StringVar(&o.Anvil.CACert, "anvil-ca-cert", "", "PEM file of the CA of a tcp:// endpoint (the provider's <state-dir>/ca.crt)")
	fs.StringVar(&o.Anvil.Cert, "anvil-cert", "", "client certificate (PEM) for a tcp:// endpoint (the provider's <state-dir>/admin.crt)")
	fs.StringVar(&o.Anvil.Key, "anvil-key", "", "client key (PEM) for a tcp:// endpoint (the provider's <state-dir>/admin.key)")
	fs.StringVar(&o.TalosVersion, "talos-version", talosversion.Tag, "Talos version of MetalMachines that name none")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "where metrics are served (0: nowhere)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "where the health probes answer")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "elect one active manager among replicas")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease")
	fs.BoolVar(&o.Debug, "debug", false, "log at debug level")
}

// Scheme is the types the manager reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()

	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("error building the scheme: %w", err)
		}
	}

	return s, nil
}

// Main parses args and runs the manager against the cluster of the kubeconfig (or the
// pod's service account) until ctx ends.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	var opts Options

	fs := pflag.NewFlagSet("capi-manager", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	opts.Flags(fs)

	if err := fs.Parse(args); err != nil {
		return err
	}

	if err := flagenv.Apply(fs, nil); err != nil {
		return err
	}

	ctrl.SetLogger(zap.New(zap.WriteTo(stderr), zap.Level(level(opts.Debug))))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("error reading the Kubernetes client config: %w", err)
	}

	return Run(ctx, cfg, opts)
}

func level(debug bool) zapcore.Level {
	if debug {
		return zapcore.DebugLevel
	}

	return zapcore.InfoLevel
}

// Run runs the manager until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	if opts.TalosVersion == "" {
		return errors.New("--talos-version is required")
	}

	scheme, err := Scheme()
	if err != nil {
		return err
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.ProbeAddr,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        "capi-manager.anvil.dev",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Secrets are read when a machine is claimed, never watched: a cache of every
		// Secret in the cluster would hold far more than the manager needs.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return fmt.Errorf("error creating the manager: %w", err)
	}

	conn, err := controlclient.Dial(opts.Anvil)
	if err != nil {
		return err
	}

	defer conn.Close()

	anvil := anvilclient.New(controlclient.State(conn), controlclient.Transitions(conn))

	if err = Setup(ctx, mgr, anvil, opts.TalosVersion); err != nil {
		return err
	}

	if err = mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("error adding the health check: %w", err)
	}

	if err = mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("error adding the readiness check: %w", err)
	}

	if err = mgr.Start(ctx); err != nil {
		return fmt.Errorf("error running the manager: %w", err)
	}

	return nil
}

// Setup adds the controllers and the Server watch to mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, anvil *anvilclient.Client, talosVersion string) error {
	changes := make(chan event.GenericEvent)

	if err := mgr.Add(&controllers.ServerWatch{Client: mgr.GetClient(), Anvil: anvil, Changes: changes}); err != nil {
		return fmt.Errorf("error adding the server watch: %w", err)
	}

	if err := (&controllers.ServerReconciler{Client: mgr.GetClient(), Anvil: anvil, Changes: changes}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("error setting up the server controller: %w", err)
	}

	if err := (&controllers.MetalClusterReconciler{Client: mgr.GetClient()}).SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("error setting up the MetalCluster controller: %w", err)
	}

	if err := (&controllers.MetalMachineReconciler{Client: mgr.GetClient(), Anvil: anvil, TalosVersion: talosVersion}).SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("error setting up the MetalMachine controller: %w", err)
	}

	return nil
}
