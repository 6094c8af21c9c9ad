package service

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	factoryclient "github.com/siderolabs/image-factory/pkg/client"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/earlyconfig"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/boot"
	"github.com/anvil-metal/anvil/provider/internal/boottrace"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/imagecache"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machinemetrics"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/omnilink"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/replica"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/tamper"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// Version is the provider's version, set at build time (-ldflags -X).
var Version = "dev"

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

	agentKernelArgs, err := parseKernelArgs("agent-kernel-args", opts.AgentKernelArgs)
	if err != nil {
		return err
	}

	talosKernelArgs, err := parseKernelArgs("talos-kernel-args", opts.TalosKernelArgs)
	if err != nil {
		return err
	}

	agentTalos, err := parseAgentTalos(opts, talosKernelArgs)
	if err != nil {
		return err
	}

	adapter, omniMode, err := omniAdapter(opts, Version)
	if err != nil {
		return err
	}

	autoAccept, autoAcceptQuery, err := parseAutoAccept(opts.AutoAccept)
	if err != nil {
		return err
	}

	if err = checkIdentityFlags(opts); err != nil {
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

	if opts.StateHistory < 1 {
		return fmt.Errorf("--state-history must be positive")
	}

	if opts.StateBackupInterval <= 0 || opts.StateBackupKeep < 1 {
		return fmt.Errorf("--state-backup-interval and --state-backup-keep must be positive")
	}

	memoryLimit, err := applyMemoryLimit(opts.MemoryLimit)
	if err != nil {
		return err
	}

	registry := prometheus.NewRegistry()

	store, site, ca, err := openState(ctx, opts, registry, logger)
	if err != nil {
		return err
	}

	defer store.Close()

	if site != nil {
		defer site.client.Close()
		// Before the client closes: the registration goes at once, not a TTL later.
		defer site.member.Close()
	}

	apiEndpoint := net.JoinHostPort(advertise.String(), strconv.Itoa(opts.APIPort))

	// Talos (1.11 and later) verifies the HTTPS it fetches its configuration over with
	// the provider's CA, given on its kernel line.
	earlyConfig, err := earlyconfig.TrustedRoots(ca.CertPEM())
	if err != nil {
		return fmt.Errorf("error encoding the CA for Talos' kernel line: %w", err)
	}

	env := &environment{
		opts:        opts,
		advertise:   advertise,
		store:       store,
		ca:          ca,
		policy:      policy,
		view:        machineview.New(),
		bmcPassword: store.Keys().BMCPassword,
		scripts: &boot.Scripts{
			BaseURL:           "http://" + apiEndpoint,
			TLSBaseURL:        "https://" + apiEndpoint,
			EarlyConfig:       earlyConfig,
			APIEndpoint:       apiEndpoint,
			CAFingerprint:     ca.Fingerprint(),
			FactoryPXEBaseURL: opts.ImageFactoryPXEBaseURL,
			Platform:          opts.TalosPlatform,
			DiskMethod:        diskMethod,
			Assets:            assets,
			Tokens:            token.NewSigner(store.Keys().TokenKey()),
			AgentKernelArgs:   agentKernelArgs,
			TalosKernelArgs:   talosKernelArgs,
			AgentTalos:        agentTalos,
		},
		observations: make(chan controllers.PXEObservation, observationBuffer),
		status:       controllers.NewMachineStatusController(),
		inventory:    controllers.NewMachineInventoryController(),
		registry:     registry,
		site:         site,
		logger:       logger,
	}

	env.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The boot timelines, and the Omni sync lag (registered standalone too, at 0, so
	// that one dashboard serves both modes).
	env.trace = boottrace.New(env.registry)
	env.status.Trace = env.trace
	env.omniLag = omnilink.NewSyncLag(env.registry)

	// A Talos boot the factory does not know the schematic of yet (404), from the cache or
	// for the cmdline of a boot without it, registers the schematic and asks again.
	env.scripts.RegisterSchematic = func(ctx context.Context, machineID string, alloc *resources.Allocation) error {
		// The allocation as stored: the boot services' view of it has no extensions.
		in, err := safe.StateGetByID[*resources.MachineIntent](ctx, store, machineID)
		if err != nil {
			return fmt.Errorf("error reading machine %s's allocation: %w", machineID, err)
		}

		full := in.TypedSpec().Allocation
		if full == nil || full.ID != alloc.ID {
			return fmt.Errorf("machine %s is no longer in allocation %s", machineID, alloc.ID)
		}

		sc, err := env.scripts.Schematic(full.Extensions, full.KernelArgs)
		if err != nil {
			return err
		}

		return controllers.RegisterSchematic(ctx, factory, full.SchematicID, sc)
	}

	env.imageCache, err = openImageCache(opts, env.registry, logger.Named("imagecache"))
	if err != nil {
		return err
	}

	if env.imageCache != nil {
		defer func() {
			if err := env.imageCache.Close(); err != nil {
				logger.Warn("error closing the image cache", zap.Error(err))
			}
		}()

		// Talos boots, by iPXE and by kexec, from the provider's cache.
		env.scripts.Cache = env.imageCache
	} else {
		// A kexec needs its target in the cache: without one, every allocation goes
		// through the firmware, decided here rather than failed machine by machine.
		env.policy.Kexec = resources.KexecNever
	}

	env.registry.MustRegister(machinemetrics.New(env.view, store, env.policy))

	var managedBy string

	if omniMode {
		// Omni owns acceptance, allocation, power, wipe and reboot.
		managedBy = "Omni at " + opts.OmniAPIEndpoint
	}

	var locker transitions.Locker

	if site != nil {
		// Transitions read other machines (an owner holds one): the site's replicas take
		// them one at a time.
		lock := &replica.Mutex{Client: site.client, Key: opts.EtcdPrefix + "/locks/transitions", TTL: opts.LeaderTTL, Fenced: store.Fenced}
		defer lock.Close()

		locker = lock
	}

	env.transitions = transitions.New(store, transitions.Options{
		Locker:             locker,
		ManagedBy:          managedBy,
		Recorder:           env.status,
		DetectedExtensions: opts.DetectedExtensions,
		RequireTPM:         opts.RequireTPM,
		InstallDisk:        opts.InstallDisk,
		// Auto-accept accepts machines that proved no TPM identity only when told to.
		AutoAcceptWithoutTPM: opts.AutoAcceptWithoutTPM,
		// The same schematic the SchematicController registers with the factory.
		SchematicFor: func(_ context.Context, _ string, alloc resources.Allocation) (schematic.Schematic, error) {
			return env.scripts.Schematic(alloc.Extensions, alloc.KernelArgs)
		},
		Logger: logger.Named("transitions"),
	})
	env.tamper = tamper.New(env.transitions, env.trace, env.registry, logger.Named("security"))

	if omniMode {
		adapter.Logger = logger.Named("omni")
		env.omni = omnilink.New(omnilink.Options{
			Socket: filepath.Join(opts.StateDir, "omni-adapter.sock"), State: store, BMCs: env.transitions, Lag: env.omniLag, Logger: logger.Named("omni"),
			// The leader's adapter says the join config; every replica boots with it.
			Shared: site != nil,
		})
		env.adapter = &adapter

		// Agents and Talos boot with Omni's join args, so that they appear in it.
		env.scripts.JoinArgs = env.omni.JoinArgs
	}

	if site != nil {
		// A replica that has not reached etcd for seconds serves no machine from its view.
		env.view.Current = site.health.Ready
	}

	env.view.OnRestart = func(err error) {
		logger.Warn("machine view fell behind the state: following it again from a fresh listing", zap.Error(err))
	}

	localCtrls, leaderCtrls, err := env.controllers(factory, labels, autoAccept, autoAcceptQuery)
	if err != nil {
		return err
	}

	runners := []runner{
		// Every replica records what it sees (boots, agents' reports) ...
		{name: "controllers", run: func(ctx context.Context) error {
			return runControllers(ctx, store, localCtrls, logger.Named("controllers"))
		}},
		{name: "machine view", run: func(ctx context.Context) error { return env.view.Run(ctx, store) }},
		{name: "state backups", run: func(ctx context.Context) error {
			return store.RunBackups(ctx, opts.StateBackupInterval, logger.Named("state"))
		}},
	}

	if site != nil {
		runners = append(runners, runner{name: "etcd health", run: site.health.Run})

		if env.omni != nil {
			runners = append(runners, runner{name: "omni join config", run: env.omni.Follow})
		}
	}

	runners = append(runners, env.agentTalosServices(factory)...)

	// ... the leader alone acts on the world: BMCs, the factory, labels, acceptance, Omni,
	// a full DHCP server's leases.
	var leading []runner

	if site != nil {
		// The site's backups: the leader's snapshots of etcd, in its state directory.
		snapshots := &replica.Snapshots{
			Client: site.client, Dir: filepath.Join(opts.StateDir, resources.BackupDirName),
			Interval: opts.StateBackupInterval, Keep: opts.StateBackupKeep, Logger: logger.Named("state"),
		}

		leading = append(leading, runner{name: "etcd snapshots", lead: func(ctx context.Context, _ state.State) error { return snapshots.Run(ctx) }})
	}

	if env.omni != nil {
		leading = append(leading,
			runner{name: "omni adapter API", lead: env.omni.ServeFenced},
			runner{name: "omni adapter", lead: func(ctx context.Context, _ state.State) error { return env.adapter.Run(ctx, env.omni) }})
	}

	// The console first: the API port sends /ui/ to it.
	for _, build := range []func() ([]runner, error){env.consoleService, env.apiServices, env.bootServices, env.controlAPI} {
		built, err := build()
		if err != nil {
			return err
		}

		for _, r := range built {
			if r.lead != nil {
				leading = append(leading, r)
			} else {
				runners = append(runners, r)
			}
		}
	}

	runners = append(runners, runner{name: "leader", run: func(ctx context.Context) error {
		return env.lead(ctx, func(ctx context.Context, st state.State) error {
			term := []runner{{name: "leader controllers", run: func(ctx context.Context) error {
				return runControllers(ctx, st, leaderCtrls, logger.Named("controllers"))
			}}}

			for _, r := range leading {
				term = append(term, runner{name: r.name, run: func(ctx context.Context) error { return r.lead(ctx, st) }})
			}

			return runAll(ctx, term)
		})
	}})

	logger.Info("provider starting",
		zap.String("advertise", apiEndpoint),
		zap.String("state", opts.State), zap.String("state_dir", opts.StateDir),
		zap.String("agent_assets", opts.AgentAssetsDir), zap.String("agent_talos", opts.AgentTalosVersion),
		zap.String("ca_fingerprint", ca.Fingerprint()),
		zap.Int("machine_labels", len(labels)),
		zap.String("auto_accept", opts.AutoAccept),
		zap.String("memory_limit", memoryLimit),
		zap.String("omni", opts.OmniAPIEndpoint), zap.String("provider_id", opts.ProviderID))

	return runAll(ctx, runners)
}

// runner is one of the provider's services.
type runner struct {
	name string
	run  func(context.Context) error
	// lead, instead of run, runs it while this provider leads its site (always, on the
	// embedded store), writing through the state the term is fenced by: what two
	// replicas must not do at once.
	lead func(context.Context, state.State) error
}

// environment is what the services are built from.
type environment struct {
	opts        Options
	advertise   netip.Addr
	store       *resources.Store
	ca          *pki.Authority
	policy      lifecycle.Policy
	bmcPassword func(machineID string) string
	transitions *transitions.Service
	// omni is the link to Omni in Omni mode, nil when standalone; adapter is the process
	// on its other end.
	omni         *omnilink.Link
	adapter      *omnilink.Adapter
	view         *machineview.View
	scripts      *boot.Scripts
	observations chan controllers.PXEObservation
	status       *controllers.MachineStatusController
	inventory    *controllers.MachineInventoryController
	machines     *controllers.MachineController // records machines and their agents' EKs; made by controllers()
	registry     *prometheus.Registry
	// trace keeps the machines' boot timelines and recent events.
	trace *boottrace.Recorder
	// tamper raises security events (counted, logged, noted, holding the machine).
	tamper *tamper.Reporter
	// omniLag times Omni's changes through the provider (Omni mode).
	omniLag *omnilink.SyncLag
	// consoleURL is where the web console is served, "" when it is off.
	consoleURL string
	// site is this replica's place among the site's on etcd, nil on the embedded store.
	site *site
	// imageCache holds the Talos boot assets served in the factory's stead.
	imageCache *imagecache.Cache
	logger     *zap.Logger
}

func (env *environment) controlSocket() string {
	if env.opts.ControlSocket != "" {
		return env.opts.ControlSocket
	}

	return filepath.Join(env.opts.StateDir, "control.sock")
}
