package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// providerStartTimeout bounds a provider's start: until its control socket exists.
const providerStartTimeout = 60 * time.Second

// startProvider starts the provider with cfg on its state directory, and records its
// command line (ProviderCommand), so that it can be started again the same way without
// cfg (RelaunchProvider).
func (s *State) startProvider(ctx context.Context, cfg Config) error {
	args, err := s.providerArgs(cfg, s.ProviderStateDir(), s.AdvertiseAddr(), labnet.Bridge)
	if err != nil {
		return err
	}

	switch {
	case s.IPv6Only:
		args = append(args, "--dhcpv6-mode", "full", "--dhcpv6-prefix", labnet.IPv6Prefix)
	case s.FullDHCP:
		args = append(args, "--dhcp-full", "--dhcp-range", labnet.DHCPStart+"-"+labnet.DHCPEnd)
	}

	if s.Omni != nil {
		omniArgs, err := s.omniProviderArgs(ctx, cfg)
		if err != nil {
			return err
		}

		args = append(args, omniArgs...)
	}

	s.ProviderCommand = args

	return s.runProvider(ctx)
}

// providerArgs is a provider's command line (the binary first) with the lab's flags and
// cfg.ProviderArgs: on stateDir, advertising advertise, its ProxyDHCP on dhcpIface.
func (s *State) providerArgs(cfg Config, stateDir, advertise, dhcpIface string) ([]string, error) {
	bin, err := filepath.Abs(cfg.ProviderBin)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", cfg.ProviderBin, err)
	}

	assets, err := filepath.Abs(cfg.AgentAssetsDir)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", cfg.AgentAssetsDir, err)
	}

	tftpRoot := filepath.Join(s.Dir, "tftp")
	if err := fillTFTPRoot(tftpRoot); err != nil {
		return nil, err
	}

	return append([]string{
		bin,
		// Power in the lab is quick to read and act on; a real BMC wants the defaults.
		"--power-poll-interval", "5s", "--min-reboot-interval", "5s",
		// The lab's machines are emulated (TCG): on a loaded host the timer interrupt can
		// miss the kernel's IO-APIC timer check, which then panics; skip the check.
		"--agent-kernel-args", "no_timer_check",
		"--state-dir", stateDir,
		"--api-advertise-address", advertise,
		"--api-port", strconv.Itoa(cfg.APIPort),
		"--dhcp-proxy-iface-or-ip", dhcpIface,
		"--tftp-root", tftpRoot,
		"--agent-assets-dir", assets,
		"--image-factory-base-url", cfg.FactoryURL,
		"--image-factory-pxe-base-url", cfg.FactoryPXEURL,
	}, cfg.ProviderArgs...), nil
}

// runProvider starts ProviderCommand in the provider's namespace, records its pid and
// waits until it serves: until its control socket exists (the API is in the namespace,
// unreachable from here; the socket is on the file system).
func (s *State) runProvider(ctx context.Context) error {
	_ = os.Remove(s.ControlSocket()) // a killed provider's, which would read as ready

	var err error

	cmd := netns.Command(context.WithoutCancel(ctx), s.ProviderNS, s.ProviderCommand[0], s.ProviderCommand[1:]...)
	if s.ProviderPID, err = proc.StartDaemon(cmd, s.ProviderLog()); err != nil {
		return fmt.Errorf("error starting the provider: %w", err)
	}

	if err := s.save(); err != nil {
		return err
	}

	return waitSocket(ctx, s.ProviderPID, s.ControlSocket(), s.ProviderLog(), "the provider")
}

// waitSocket waits until the provider pid serves its control socket (its API is in a
// namespace, unreachable from here; the socket is on the file system).
func waitSocket(ctx context.Context, pid int, socket, log, what string) error {
	deadline := time.Now().Add(providerStartTimeout)

	for {
		if _, err := os.Stat(socket); err == nil {
			return nil
		}

		if !proc.Alive(pid) {
			return fmt.Errorf("%s exited; see %s", what, log)
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up in %s; see %s", what, providerStartTimeout, log)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// KillProvider kills the provider outright (SIGKILL: nothing of its own shutdown runs,
// as in a crash) and starts it again with cfg on its state.
func (s *State) KillProvider(ctx context.Context, cfg Config) error {
	if err := s.stopProvider(ctx, true); err != nil {
		return err
	}

	return s.startProvider(ctx, cfg)
}

// RestartProvider stops the provider and starts it again with cfg (e.g. other
// ProviderArgs); its state directory, and so what it knows, is kept.
func (s *State) RestartProvider(ctx context.Context, cfg Config) error {
	if err := s.stopProvider(ctx, false); err != nil {
		return err
	}

	return s.startProvider(ctx, cfg)
}

// RelaunchProvider stops the provider — SIGTERM and up to 10 s for its shutdown, or
// SIGKILL at once when kill — and starts it again on its state with the very command
// line the lab last started it with (ProviderCommand: Omni mode, the lab's flags and
// ProviderArgs included), without the Config that made it. The new pid is saved in the
// state file. Nothing else is touched: no machine is powered on or off, no BMC told.
func (s *State) RelaunchProvider(ctx context.Context, kill bool) error {
	if len(s.ProviderCommand) == 0 {
		return fmt.Errorf("the lab in %s recorded no provider command line (it was brought up by an older lab): "+
			"lab down, then lab up", s.Dir)
	}

	if !netns.Exists(s.ProviderNS) {
		return fmt.Errorf("the lab in %s is not up (no namespace %s): lab up", s.Dir, s.ProviderNS)
	}

	if err := s.stopProvider(ctx, kill); err != nil {
		return err
	}

	return s.runProvider(ctx)
}

// stopProvider stops the recorded provider, with SIGKILL at once when kill. A pid that
// is not this lab's provider any more (it exited, and the pid was reused) is left alone.
func (s *State) stopProvider(ctx context.Context, kill bool) error {
	pid := s.ProviderPID
	if !s.isProvider(pid) {
		return nil
	}

	if !kill {
		if err := proc.Stop(ctx, pid, 10*time.Second); err != nil {
			return fmt.Errorf("error stopping the provider: %w", err)
		}

		return nil
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("error killing the provider: %w", err)
	}

	if !proc.WaitGone(ctx, pid, 10*time.Second) {
		return fmt.Errorf("the provider (pid %d) survived SIGKILL", pid)
	}

	return nil
}

// isProvider reports whether pid runs and is this lab's provider: its command line
// names the provider's state directory.
func (s *State) isProvider(pid int) bool {
	if !proc.Alive(pid) {
		return false
	}

	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}

	return bytes.Contains(cmdline, []byte("\x00"+s.ProviderStateDir()+"\x00"))
}

// fillTFTPRoot copies the iPXE binaries the firmware's own PXE fetches, resolved:
// Debian's /usr/lib/ipxe/ipxe.efi is a symlink to /boot, which the TFTP root must not
// need.
func fillTFTPRoot(root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("error creating %s: %w", root, err)
	}

	for _, name := range []string{"ipxe.efi", "snponly.efi", "undionly.kpxe"} {
		src, err := filepath.EvalSymlinks(filepath.Join("/usr/lib/ipxe", name))
		if err != nil {
			continue // missing: the provider reports it when asked for it
		}

		if err := copyFile(src, filepath.Join(root, name)); err != nil {
			return err
		}
	}

	return nil
}
