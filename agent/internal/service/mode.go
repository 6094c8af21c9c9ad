package service

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/internal/initsys"
	"github.com/anvil-metal/anvil/internal/link"
)

// Mode is what the agent owns of the machine.
type Mode string

const (
	// ModeInitramfs is the agent as PID 1 of its own initramfs: it mounts, loads modules,
	// brings up the network, joins SideroLink and serves the maintenance API itself.
	ModeInitramfs Mode = "initramfs"
	// ModeExtension is the agent as a Talos system extension service (metal-agent): Talos
	// does PID 1, the network, SideroLink and the maintenance API; the agent does the
	// provider session and its orders only, and reboots and powers off through Talos.
	ModeExtension Mode = "extension"
)

// Modes are the agent's modes, as --mode takes them.
var Modes = []Mode{ModeInitramfs, ModeExtension}

// ParseMode reads a mode's name; "" is the initramfs mode.
func ParseMode(s string) (Mode, error) {
	if s == "" {
		return ModeInitramfs, nil
	}

	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}

	return "", fmt.Errorf("unknown agent mode %q (want %s or %s)", s, ModeInitramfs, ModeExtension)
}

// checkMode refuses options that ask extension mode for what Talos does: a silent
// "ignored" would leave a reader thinking the agent had done it.
func checkMode(opts Options) error {
	if opts.Mode != ModeExtension {
		return nil
	}

	var errs []error

	for _, o := range []struct {
		set  bool
		what string
	}{
		{opts.PID1, "PID 1's duties"},
		{opts.Modules, "loading kernel modules"},
		{opts.Network, "configuring the network"},
	} {
		if o.set {
			errs = append(errs, fmt.Errorf("extension mode leaves %s to Talos", o.what))
		}
	}

	return errors.Join(errs...)
}

// duties are what the initramfs mode does to the machine besides the provider session:
// Talos does each of them in extension mode. Apart, so that a test can replace them and
// see that extension mode never calls them.
type duties struct {
	// mount mounts the pseudo filesystems and starts reaping orphans, as PID 1.
	mount func(ctx context.Context, logger *zap.Logger)
	// loadModules loads the kernel modules for the hardware found.
	loadModules func(ctx context.Context, logger *zap.Logger)
	// startNetwork brings up the physical links with DHCP and waits for an address.
	startNetwork func(ctx context.Context, logger *zap.Logger)
	// joinOmni joins SideroLink, serves the maintenance API and ships the kernel log.
	joinOmni func(ctx context.Context, o *omniAgent)
}

// initramfsDuties are the real ones.
func initramfsDuties() *duties {
	return &duties{
		mount: func(ctx context.Context, logger *zap.Logger) {
			if err := initsys.MountAll(logger, "/", initsys.Mounts); err != nil {
				logger.Warn("some mounts failed", zap.Error(err))
			}

			go initsys.NewReaper(logger).Reap(ctx)
		},
		loadModules:  loadModules,
		startNetwork: startNetwork,
		joinOmni:     func(ctx context.Context, o *omniAgent) { o.run(ctx) },
	}
}

func startNetwork(ctx context.Context, logger *zap.Logger) {
	links, err := link.Start(ctx, link.Options{Logger: logger.Named("link")})
	if err != nil {
		logger.Warn("error starting the network", zap.Error(err))

		return
	}

	if summary, err := links.WaitAddress(ctx, addressWait); err != nil {
		logger.Warn("no address yet; trying the provider anyway", zap.Error(err))
	} else {
		logger.Info("network up", zap.Any("links", summary))
	}
}
