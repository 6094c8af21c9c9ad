// Package service wires the metal agent together: PID-1 duties, kernel modules, network,
// inventory, the order executor and the session with the provider, and — with Omni's
// join args on the cmdline — SideroLink, the maintenance API and the kernel log to Omni.
// In extension mode (a Talos system extension) Talos does all but the inventory, the
// orders and the session, and the agent reboots and powers off through Talos.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/agent/internal/config"
	"github.com/anvil-metal/anvil/agent/internal/inventory"
	"github.com/anvil-metal/anvil/agent/internal/orders"
	"github.com/anvil-metal/anvil/agent/internal/session"
	"github.com/anvil-metal/anvil/internal/modules"
	"github.com/anvil-metal/anvil/internal/resourcewire"
)

// Version is the agent's version, set at build time.
var Version = "dev"

// addressWait bounds how long the agent waits for an address before it tries the
// provider anyway (a link may be configured by hand outside an initramfs).
const addressWait = 2 * time.Minute

// firstPassWait bounds how long the first registration waits for the inventory's first
// pass: generous (a disk scan behind a slow controller takes seconds), but a source that
// hangs must not keep the machine from registering at all.
const firstPassWait = time.Minute

// inventoryCheck is how often the inventory is compared with what was reported.
const inventoryCheck = 10 * time.Second

// Options configure the agent.
type Options struct {
	// Config overrides the kernel cmdline's configuration.
	Config config.Config
	// PID1 runs the init duties: mounts, reaping, modules, network.
	PID1 bool
	// Modules and Network load kernel modules and configure links.
	Modules bool
	Network bool
	// DryRun logs reboots, power-offs and kexecs instead of doing them.
	DryRun  bool
	Sources inventory.Sources
	Logger  *zap.Logger
	// Mode is what the agent owns of the machine; "" is ModeInitramfs. Extension mode
	// refuses PID1, Modules and Network.
	Mode Mode
	// MachinedSocket is Talos' machined API, through which extension mode reboots and
	// powers off (constants.MachineSocketPath when empty).
	MachinedSocket string

	// duties replaces the initramfs mode's own duties in tests (initramfsDuties when nil).
	duties *duties
}

// Run runs the agent until ctx is done. As PID 1 it must never return early: the caller
// keeps the process alive whatever it returns.
func Run(ctx context.Context, opts Options) error {
	if opts.Mode == "" {
		opts.Mode = ModeInitramfs
	}

	if err := checkMode(opts); err != nil {
		return err
	}

	do := opts.duties
	if do == nil {
		do = initramfsDuties()
	}

	logger := opts.Logger
	logger.Info("metal agent starting", zap.String("version", Version), zap.String("mode", string(opts.Mode)), zap.Bool("pid1", opts.PID1))

	if opts.PID1 {
		do.mount(ctx, logger)
	}

	cmdline, err := os.ReadFile(filepath.Join(procRoot(opts.Sources), "cmdline"))
	if err != nil && opts.PID1 {
		logger.Warn("error reading the kernel cmdline", zap.Error(err))
	}

	cfg := config.FromCmdline(string(cmdline)).Merge(opts.Config)
	if err = cfg.Validate(); err != nil {
		return fmt.Errorf("the agent has no usable provider configuration: %w", err)
	}

	if opts.Modules {
		do.loadModules(ctx, logger)
	}

	if opts.Network {
		do.startNetwork(ctx, logger)
	}

	st, err := inventory.NewState(ctx)
	if err != nil {
		return fmt.Errorf("error creating the inventory state: %w", err)
	}

	collector := inventory.NewCollector(st, opts.Sources, logger.Named("inventory"))

	go func() {
		if err := collector.Run(ctx); err != nil {
			logger.Error("inventory stopped", zap.Error(err))
		}
	}()

	executor := orders.New(actions(opts, logger.Named("orders")), logger.Named("orders"))

	go executor.Run(ctx)

	// The first registration is what the provider first knows of the machine: it waits
	// for every collector's first pass, or a machine would show without its disks.
	if late := collector.WaitFirstPass(ctx, firstPassWait); len(late) > 0 {
		logger.Warn("registering before every inventory collector has read its source once", zap.Strings("late", late),
			zap.Duration("waited", firstPassWait))
	}

	// With Omni's join args on the cmdline, the machine also appears in Omni as Talos
	// in maintenance mode; started once the inventory is read (the node unique token's
	// fingerprint is its NICs). Under Talos, Talos itself joins Omni with the same args.
	if opts.Mode == ModeInitramfs {
		if omniCfg, err := cfg.Omni(); err != nil {
			logger.Warn("Omni's join arguments are malformed: not joining Omni", zap.Error(err))
		} else if omniCfg.API != nil || omniCfg.KernelLog != nil {
			o := &omniAgent{
				cfg: omniCfg, machineID: cfg.MachineID, st: st, procRoot: procRoot(opts.Sources), pid1: opts.PID1, logger: logger.Named("omni"),
				secrets: logSecrets(string(cmdline), cfg, omniCfg),
			}

			go do.joinOmni(ctx, o)
		}
	}

	var kexecUnavailable string

	switch {
	case opts.Mode == ModeExtension:
		kexecUnavailable = "the agent runs as a Talos extension: Talos keeps kexec to itself"
	case opts.PID1:
		kexecUnavailable = kexecFileUnavailable()
	}

	// The TPM is opened once the modules are in (a TPM behind SPI or I2C is a module).
	identity := openIdentity(opts.Sources.DevRoot, logger.Named("tpm"))

	return session.Run(ctx, session.Options{
		Config:           cfg,
		Identity:         identity,
		BootID:           bootID(procRoot(opts.Sources)),
		AgentVersion:     Version,
		KexecUnavailable: kexecUnavailable,
		MACs:             func() []string { return macs(ctx, st) },
		Inventory:        snapshots(st, logger),
		Executor:         executor,
		Logger:           logger.Named("session"),
		OnRegistered:     func() { logger.Info("registered", zap.String("machine", cfg.MachineID)) },
	})
}

// actions are the orders' effects in the agent's mode.
func actions(opts Options, logger *zap.Logger) orders.Actions {
	devRoot := opts.Sources.DevRoot
	if devRoot == "" {
		devRoot = "/dev"
	}

	machine := &machineActions{
		logger: logger, sysfsRoot: sysfsRoot(opts.Sources), devRoot: devRoot, dryRun: opts.DryRun, tmpDir: os.TempDir(),
		mountinfo: filepath.Join(procRoot(opts.Sources), "self", "mountinfo"),
	}

	if opts.Mode != ModeExtension {
		return machine
	}

	return &talosActions{machine: machine, machined: &machined{socket: opts.MachinedSocket}, logger: logger, dryRun: opts.DryRun}
}

func loadModules(ctx context.Context, logger *zap.Logger) {
	dir, err := modules.DefaultDir()
	if err != nil {
		logger.Warn("no kernel modules directory", zap.Error(err))

		return
	}

	index, err := modules.Open(dir)
	if err != nil {
		logger.Warn("error reading the kernel modules index", zap.Error(err))

		return
	}

	result, err := modules.Load(ctx, modules.Options{Index: index, Always: modules.Always, Logger: logger.Named("modules")})
	if err != nil {
		logger.Warn("error loading kernel modules", zap.Error(err))
	}

	logger.Info("kernel modules loaded", zap.Int("loaded", len(result.Loaded)), zap.Int("failed", len(result.Failed)),
		zap.Duration("took", result.Duration))
}

// snapshots returns the inventory for the session: encoded now, and a channel closed when
// it changes from what was encoded.
func snapshots(st state.State, logger *zap.Logger) func(ctx context.Context) ([][]byte, <-chan struct{}, error) {
	return func(ctx context.Context) ([][]byte, <-chan struct{}, error) {
		encoded, sum, err := encode(ctx, st)

		changed := make(chan struct{})

		go func() {
			ticker := time.NewTicker(inventoryCheck)
			defer ticker.Stop()

			for {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}

				if _, now, err := encode(ctx, st); err == nil && now != sum {
					close(changed)

					return
				}
			}
		}()

		if err != nil {
			logger.Warn("error encoding the inventory", zap.Error(err))
		}

		return encoded, changed, err
	}
}

// encode encodes the inventory and sums what it says (specs, not versions), so a rewrite
// that changes nothing is not a change.
func encode(ctx context.Context, st state.State) ([][]byte, string, error) {
	inv, err := inventory.Snapshot(ctx, st)
	if err != nil {
		return nil, "", err
	}

	resources := inv.Resources()
	h := sha256.New()

	for _, r := range resources {
		fmt.Fprintf(h, "%s/%s %+v\n", r.Metadata().Type(), r.Metadata().ID(), r.Spec())
	}

	encoded, err := resourcewire.Encode(resources)

	return encoded, hex.EncodeToString(h.Sum(nil)), err
}

// macs lists the physical NICs' addresses from the inventory.
func macs(ctx context.Context, st state.State) []string {
	inv, err := inventory.Snapshot(ctx, st)
	if err != nil {
		return nil
	}

	var out []string

	for _, l := range inv.Links {
		if l.TypedSpec().Physical() {
			out = append(out, l.TypedSpec().HardwareAddr.String())
		}
	}

	return out
}

func bootID(proc string) string {
	b, err := os.ReadFile(filepath.Join(proc, "sys/kernel/random/boot_id"))
	if err != nil {
		return ""
	}

	return strings.TrimSpace(string(b))
}

func procRoot(src inventory.Sources) string {
	if src.ProcRoot != "" {
		return src.ProcRoot
	}

	return "/proc"
}

func sysfsRoot(src inventory.Sources) string {
	if src.SysfsRoot != "" {
		return src.SysfsRoot
	}

	return "/sys"
}
