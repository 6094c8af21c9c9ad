// Command fleetsim runs simulated machines with real agent sessions against a provider on
// loopback, for the fleet benchmark and the chaos tests: see agent/internal/fleetsim.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/anvil-metal/anvil/agent/internal/fleetsim"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)

	var (
		cfg      fleetsim.Config
		listen   string
		logLevel string
		bmcPort  uint
	)

	fs.StringVar(&cfg.ProviderURL, "provider", "", "the provider's HTTP base, http://127.0.0.1:PORT")
	fs.IntVar(&cfg.Machines, "n", 100, "machines")
	fs.IntVar(&cfg.First, "first", 0, "index of the first machine")
	fs.Int64Var(&cfg.Seed, "seed", 1, "identity seed")
	fs.IntVar(&cfg.BootConcurrency, "boot-concurrency", 256, "boot-script fetches at once")
	fs.DurationVar(&cfg.BootRetry, "boot-retry", 2*time.Second, "wait before fetching a boot script again")
	fs.DurationVar(&cfg.RebootDelay, "reboot-delay", time.Second, "firmware time between a reboot and its boot-script fetch")
	fs.DurationVar(&cfg.WipeFast, "wipe-fast", 2*time.Second, "simulated duration of a fast wipe")
	fs.DurationVar(&cfg.WipeZeroes, "wipe-zeroes", 30*time.Second, "simulated duration of a zeroes wipe")
	fs.DurationVar(&cfg.WipeSecure, "wipe-secure", 10*time.Second, "simulated duration of a secure erase")
	fs.DurationVar(&cfg.KexecLoad, "kexec-load", time.Second, "simulated time to load a kexec target")
	fs.BoolVar(&cfg.Kexec, "kexec", true, "agents offer kexec")
	fs.BoolVar(&cfg.TalosChain, "talos-chain", false, "fetch the kernel a Talos boot script boots (the Image Factory's without the provider's cache); a failure is a failed boot, retried")
	fs.StringVar(&cfg.BMCAddress, "bmc-address", "127.0.0.1", "BMC LAN address reported to BMC orders")
	fs.UintVar(&bmcPort, "bmc-port", 623, "BMC port reported to BMC orders")
	fs.StringVar(&cfg.AgentVersion, "agent-version", "dev", "version the agents say they are")
	fs.StringVar(&cfg.SMBIOSDir, "smbios-dir", "", "SMBIOS dumps (*.dmi) of the hardware profiles (default: go-smbios' testdata in the module cache)")
	fs.StringVar(&listen, "listen", "127.0.0.1:0", "address of the power API and status endpoint")
	fs.StringVar(&logLevel, "log-level", "error", "level of the agents' own log on stderr")

	if err := fs.Parse(args); err != nil {
		return err
	}

	if bmcPort > 65535 {
		return fmt.Errorf("-bmc-port %d is not a port", bmcPort)
	}

	cfg.BMCPort = uint32(bmcPort)

	level, err := zapcore.ParseLevel(logLevel)
	if err != nil {
		return fmt.Errorf("invalid -log-level: %w", err)
	}

	logCfg := zap.NewProductionConfig()
	logCfg.Level = zap.NewAtomicLevelAt(level)
	logCfg.Sampling = nil

	if cfg.Logger, err = logCfg.Build(); err != nil {
		return fmt.Errorf("error building the logger: %w", err)
	}

	cfg.Events = os.Stdout

	fleet, err := fleetsim.New(cfg)
	if err != nil {
		return err
	}

	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", listen, err)
	}

	// Commands on stdin; at its end the machines keep running until a signal.
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			_ = fleet.Control(sc.Text()) // acknowledged, error included, as an event
		}
	}()

	return fleet.Run(ctx, l)
}
