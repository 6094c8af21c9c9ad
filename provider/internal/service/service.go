package service

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	factoryclient "github.com/siderolabs/image-factory/pkg/client"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/control"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// observationBuffer is how many PXE observations may wait for the machine controller: a
// rack of new machines booting at once is news for each, and every write is a sync.
const observationBuffer = 16384

// Run runs the provider until ctx is done.
func Run(ctx context.Context, opts Options, logger *zap.Logger) error {
	advertise, err := advertiseAddress(opts.APIAdvertiseAddress)
	if err != nil {
		return err
	}

	labels, err := parseLabels(opts.MachineLabels)
	if err != nil {
		return err
	}

	diskMethod, err := boot.ParseDiskMethod(opts.BootFromDiskMethod)
	if err != nil {
		return err
	}

	agentKernelArgs, err := parseKernelArgs(opts.AgentKernelArgs)
	if err != nil {
		return err
	}

	autoAccept, autoAcceptQuery, err := parseAutoAccept(opts.AutoAccept)
	if err != nil {
		return err
	}

	policy, err := parsePolicy(opts)
	if err != nil {
		return err
	}

	assets, err := boot.LoadAgentAssets(opts.AgentAssetsDir)
	if err != nil {
		return err
	}

	factory, err := factoryclient.New(opts.ImageFactoryBaseURL)
	if err != nil {
		return fmt.Errorf("invalid --image-factory-base-url: %w", err)
	}

	store, err := resources.Open(ctx, opts.StateDir)
	if err != nil {
		return err
	}

	defer store.Close() //nolint:errcheck

	if opts.ProvisionBMCCredentials {
		policy.BMCPassword = store.Keys().BMCPassword
	}

	ca, err := loadAuthority(opts.StateDir)
	if err != nil {
		return err
	}

	apiEndpoint := net.JoinHostPort(advertise.String(), strconv.Itoa(opts.APIPort))

	env := &environment{
		opts:      opts,
		advertise: advertise,
		store:     store,
		ca:        ca,
		policy:    policy,
		view:      machineview.New(),
		scripts: &boot.Scripts{
			BaseURL:           "http://" + apiEndpoint,
			APIEndpoint:       apiEndpoint,
			CAFingerprint:     ca.Fingerprint(),
			FactoryPXEBaseURL: opts.ImageFactoryPXEBaseURL,
			Platform:          opts.TalosPlatform,
			DiskMethod:        diskMethod,
			Assets:            assets,
			TokenKey:          store.Keys().TokenKey(),
			AgentKernelArgs:   agentKernelArgs,
		},
		observations: make(chan controllers.PXEObservation, observationBuffer),
		status:       controllers.NewMachineStatusController(),
		inventory:    controllers.NewMachineInventoryController(),
		registry:     prometheus.NewRegistry(),
		logger:       logger,
	}

	env.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ctrlRuntime, err := runtime.NewRuntime(store, logger.Named("controllers"))
	if err != nil {
		return fmt.Errorf("error creating the controller runtime: %w", err)
	}

	powerCtrl, err := newPowerController(opts)
	if err != nil {
		return err
	}

	runners := []runner{
		{name: "controllers", run: ctrlRuntime.Run},
		{name: "machine view", run: func(ctx context.Context) error { return env.view.Run(ctx, store) }},
	}

	// The services are built before the controllers are registered: auto-accept goes
	// through the control API's transitions.
	for _, build := range []func() ([]runner, error){env.apiServices, env.bootServices, env.controlAPI} {
		built, err := build()
		if err != nil {
			return err
		}

		runners = append(runners, built...)
	}

	ctrls := []controller.Controller{
		&controllers.MachineController{Observations: env.observations, Labels: labels},
		powerCtrl,
		env.status,
		env.inventory,
		&controllers.SchematicController{Factory: factory, SchematicFor: env.scripts.Schematic},
	}

	if autoAccept {
		ctrls = append(ctrls, &controllers.AutoAcceptController{
			Acceptor: env.control.Transitions(), Selector: autoAcceptQuery, Description: strings.TrimSpace(opts.AutoAccept),
		})
	}

	for _, ctrl := range ctrls {
		if err = ctrlRuntime.RegisterController(ctrl); err != nil {
			return fmt.Errorf("error registering %s: %w", ctrl.Name(), err)
		}
	}

	// One machine per reconcile: its inputs change with every boot stamp.
	labelsCtrl := &controllers.MachineLabelsController{Static: labels}
	if err = ctrlRuntime.RegisterQController(labelsCtrl); err != nil {
		return fmt.Errorf("error registering %s: %w", labelsCtrl.Name(), err)
	}

	logger.Info("provider starting",
		zap.String("advertise", apiEndpoint),
		zap.String("state", opts.StateDir),
		zap.String("agent_assets", opts.AgentAssetsDir),
		zap.String("ca_fingerprint", ca.Fingerprint()),
		zap.Int("machine_labels", len(labels)),
		zap.String("auto_accept", opts.AutoAccept))

	eg, ctx := errgroup.WithContext(ctx)

	for _, r := range runners {
		eg.Go(func() error {
			if err := r.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}

			return nil
		})
	}

	return eg.Wait()
}

// runner is one of the provider's services.
type runner struct {
	name string
	run  func(context.Context) error
}

// environment is what the services are built from.
type environment struct {
	opts         Options
	advertise    netip.Addr
	store        *resources.Store
	ca           *pki.Authority
	policy       agentapi.Policy
	view         *machineview.View
	scripts      *boot.Scripts
	observations chan controllers.PXEObservation
	status       *controllers.MachineStatusController
	inventory    *controllers.MachineInventoryController
	control      *control.Server
	registry     *prometheus.Registry
	logger       *zap.Logger
}

func (env *environment) controlSocket() string {
	if env.opts.ControlSocket != "" {
		return env.opts.ControlSocket
	}

	return filepath.Join(env.opts.StateDir, "control.sock")
}
