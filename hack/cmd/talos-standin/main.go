// Command talos-standin is the lab's test "Talos": PID 1 of an initramfs the Image
// Factory stand-in serves. It reports on the serial console how it was booted, fetches
// its machine config and sends the install events real Talos sends, then reboots as
// Talos does into the installed system. Every step logs its error and goes on where it
// can: PID 1 must never exit or panic. Outside an initramfs it runs the same steps on
// the cmdline given with --cmdline, without mounting, loading modules or rebooting.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/anvil-metal/anvil/internal/bootparams"
	"github.com/anvil-metal/anvil/internal/earlyconfig"
	"github.com/anvil-metal/anvil/internal/initsys"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/link"
	"github.com/anvil-metal/anvil/internal/modules"
)

// Prefix starts every line the tests grep for.
const Prefix = "TALOS-STANDIN"

// Bounds on the network steps: generous under TCG, but a stuck step must not keep the
// machine from rebooting forever.
const (
	addressWait = 2 * time.Minute
	attempts    = 8
	attemptWait = 15 * time.Second
	firstRetry  = time.Second
	maxRetry    = 15 * time.Second
)

func main() {
	if initsys.IsPID1() {
		runPID1()
	}

	cmdline := flag.String("cmdline", "", "kernel cmdline to act on (default /proc/cmdline)")
	flag.Parse()

	logger := initsys.NewLogger(zapcore.InfoLevel, os.Stderr)

	if err := run(context.Background(), logger, os.Stdout, *cmdline); err != nil {
		logger.Error("talos stand-in failed", zap.Error(err))
		os.Exit(1)
	}
}

// runPID1 runs as init; it never returns, since PID 1 exiting is a kernel panic.
func runPID1() {
	console, err := initsys.OpenConsole()
	if err != nil {
		console = os.Stderr
	}

	logger := initsys.NewLogger(zapcore.InfoLevel, console)

	// The pseudo filesystems first: the kernel log and the list of consoles are there.
	if err := initsys.MountAll(logger, "/", initsys.Mounts); err != nil {
		logger.Error("error mounting", zap.Error(err))
	}

	// /dev/console is only the last console= (tty0 in the factory's cmdline); the tests
	// read the serial one, so write to every console the kernel has.
	consoles := io.Writer(console)
	if ws := activeConsoles(logger); len(ws) > 0 {
		consoles = io.MultiWriter(ws...)
	}

	// Logs and the lines tests look for go through the kernel's log, which prints them
	// whole on every console: the kernel's own messages (disks and NICs still probing)
	// would cut a line written to the serial console directly.
	logger, kmsg := initsys.PID1Logger(zapcore.InfoLevel, consoles)

	out := consoles
	if kmsg != nil {
		out = initsys.NewKernelLog(kmsg, initsys.PriorityNotice, consoles)
	}

	logger.Info("talos stand-in starting")

	err = initsys.Guard(logger, func() error {
		ctx := context.Background()

		loadModules(ctx, logger)

		links, err := link.Start(ctx, link.Options{Logger: logger.Named("link")})
		if err != nil {
			logger.Error("error starting the network", zap.Error(err))
		} else if summary, err := links.WaitAddress(ctx, addressWait); err != nil {
			logger.Error("no address", zap.Error(err))
		} else {
			logger.Info("network up", zap.Any("links", summary))
		}

		return run(ctx, logger, out, "")
	})
	if err != nil {
		logger.Error("talos stand-in failed", zap.Error(err))
	}

	logger.Info("rebooting into the installed system")

	if err = initsys.Reboot(); err != nil {
		logger.Error("error rebooting", zap.Error(err))
	}

	select {}
}

// activeConsoles opens every console the kernel writes to (/sys/class/tty/console/active).
func activeConsoles(logger *zap.Logger) []io.Writer {
	b, err := os.ReadFile("/sys/class/tty/console/active")
	if err != nil {
		logger.Warn("error listing the consoles", zap.Error(err))

		return nil
	}

	var ws []io.Writer

	for _, name := range strings.Fields(string(b)) {
		f, err := os.OpenFile("/dev/"+name, os.O_WRONLY|unix.O_NOCTTY, 0) //nolint:gosec // a console name the kernel listed
		if err != nil {
			logger.Warn("error opening a console", zap.String("console", name), zap.Error(err))

			continue
		}

		ws = append(ws, f)
	}

	return ws
}

// loadModules loads what the hardware asks for (the NIC's driver above all).
func loadModules(ctx context.Context, logger *zap.Logger) {
	dir, err := modules.DefaultDir()
	if err != nil {
		logger.Error("error finding the modules", zap.Error(err))

		return
	}

	index, err := modules.Open(dir)
	if err != nil {
		logger.Error("error reading the modules index", zap.Error(err))

		return
	}

	// SideroLink's WireGuard: the kernel's, else wireguard-go over TUN.
	res, err := modules.Load(ctx, modules.Options{Index: index, Always: []string{"tun", "wireguard"}, Logger: logger.Named("modules")})
	if err != nil {
		logger.Error("error loading modules", zap.Error(err))
	}

	logger.Info("kernel modules loaded", zap.Int("loaded", len(res.Loaded)), zap.Int("failed", len(res.Failed)), zap.Duration("took", res.Duration))
}

// run reports the boot, fetches the config and sends the install events; out gets the
// lines tests grep for. It returns the first error of a step it could not get past.
func run(ctx context.Context, logger *zap.Logger, out io.Writer, cmdline string) error {
	if cmdline == "" {
		b, err := os.ReadFile("/proc/cmdline")
		if err != nil {
			return fmt.Errorf("error reading the cmdline: %w", err)
		}

		cmdline = strings.TrimSpace(string(b))
	}

	args := parseCmdline(cmdline)

	_, installed := args[labfactory.InstalledArg]
	omni := installed || args[bootparams.SideroLinkAPI] != ""

	fmt.Fprintf(out, "%s schematic=%s version=%s\n", Prefix, args[labfactory.SchematicArg], args[labfactory.VersionArg])
	// Beside Omni the cmdline carries the join token: only the boot's own arguments.
	if !omni {
		fmt.Fprintf(out, "%s cmdline=%s\n", Prefix, cmdline)
	}

	if installed {
		return runOmni(ctx, logger, out, args, true)
	}

	var errs []error

	// As Talos (1.11 and later) does: the roots talos.config.early gives are trusted for
	// the configuration's fetch over HTTPS. The stand-in trusts nothing else.
	client := http.DefaultClient

	if v, ok := args[earlyconfig.Param]; ok {
		roots, err := earlyconfig.Roots(v)
		if err != nil {
			return fmt.Errorf("error reading %s: %w", earlyconfig.Param, err)
		}

		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	}

	if u := args["talos.config"]; u == "" {
		logger.Warn("no talos.config= on the cmdline")
	} else if status, n, sum, err := fetchConfig(ctx, logger, client, u); err != nil {
		errs = append(errs, err)
		logger.Error("error fetching the config", zap.Error(err))
	} else {
		// Never the config itself: it holds the cluster's secrets.
		fmt.Fprintf(out, "%s config status=%d bytes=%d sha256=%s\n", Prefix, status, n, sum)
	}

	if omni {
		// Beside Omni, Omni applies the config and hears of the install: see omni.go.
		return errors.Join(append(errs, runOmni(ctx, logger, out, args, false))...)
	}

	if sink := args["talos.events.sink"]; sink == "" {
		logger.Warn("no talos.events.sink= on the cmdline")
	} else if err := sendInstall(ctx, logger, sink); err != nil {
		errs = append(errs, err)
		logger.Error("error sending the install events", zap.Error(err))
	} else {
		fmt.Fprintf(out, "%s installed\n", Prefix)
	}

	return errors.Join(errs...)
}

// parseCmdline maps each key=value argument to its value (the last one wins, as in
// Talos); flags without a value map to "".
func parseCmdline(cmdline string) map[string]string {
	args := map[string]string{}

	for _, f := range strings.Fields(cmdline) {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}

	return args
}

// fetchConfig GETs the machine config, retrying transport errors and server errors,
// and returns its status, size and SHA-256.
func fetchConfig(ctx context.Context, logger *zap.Logger, client *http.Client, url string) (status int, n int64, sum string, err error) {
	err = retry(ctx, logger, "config fetch", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return permanent{fmt.Errorf("error making the config request: %w", err)}
		}

		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("error fetching the config: %w", err)
		}

		defer resp.Body.Close()

		h := sha256.New()

		n, err = io.Copy(h, resp.Body)
		if err != nil {
			return fmt.Errorf("error reading the config: %w", err)
		}

		status, sum = resp.StatusCode, hex.EncodeToString(h.Sum(nil))

		if status >= 500 {
			return fmt.Errorf("config fetch: status %d", status)
		}

		return nil
	})

	return status, n, sum, err
}

// installEvents are the events real Talos (v1.13) sends its event sink as its install
// sequence runs and reboots into the installed system, those the provider reads: the
// sequence's start, its install phase, its kexec phase starting (which only follows a
// successful install: the provider marks the machine installed there), the sequence's
// stop (published whether the install worked or not) and its end in the reboot, a FATAL
// error of unix.Reboot (what Sidero and Omni count).
func installEvents() []proto.Message {
	return []proto.Message{
		&machine.SequenceEvent{Sequence: "install", Action: machine.SequenceEvent_START},
		&machine.PhaseEvent{Phase: "install", Action: machine.PhaseEvent_START},
		&machine.PhaseEvent{Phase: "install", Action: machine.PhaseEvent_STOP},
		&machine.PhaseEvent{Phase: "kexec", Action: machine.PhaseEvent_START},
		&machine.SequenceEvent{Sequence: "install", Action: machine.SequenceEvent_STOP},
		&machine.SequenceEvent{
			Sequence: "install", Action: machine.SequenceEvent_NOOP,
			Error: &common.Error{Code: common.Code_FATAL, Message: installRebootError},
		},
	}
}

// installRebootError is the error real Talos v1.13's install sequence ends with as it
// kexecs into the installed system (its eighth phase, reboot; LINUX_REBOOT_CMD_KEXEC).
const installRebootError = "sequence failed: error running phase 8 in install sequence: task 1/1: failed, unix.Reboot(45584543)"

// sendInstall sends the install sequence's events, as Talos does once the installer
// has run.
func sendInstall(ctx context.Context, logger *zap.Logger, sink string) error {
	conn, err := grpc.NewClient(sink, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("error dialing the event sink %s: %w", sink, err)
	}

	defer conn.Close()

	client := events.NewEventSinkServiceClient(conn)

	for _, ev := range installEvents() {
		data, err := anypb.New(ev)
		if err != nil {
			return fmt.Errorf("error encoding the install event: %w", err)
		}

		req := &events.EventRequest{Data: data, Id: fmt.Sprintf("standin-%d", time.Now().UnixNano())}
		what := fmt.Sprintf("install event %s", ev)

		err = retry(ctx, logger, what, func(ctx context.Context) error {
			_, err := client.Publish(ctx, req)

			return err
		})
		if err != nil {
			return fmt.Errorf("error sending the %s: %w", what, err)
		}

		logger.Info("install event acknowledged", zap.String("event", what))
	}

	return nil
}

// permanent marks an error retry must not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry runs fn until it succeeds, up to attempts times, each bounded, with doubling
// waits between.
func retry(ctx context.Context, logger *zap.Logger, what string, fn func(context.Context) error) error {
	wait := firstRetry

	var err, last error

	for i := 1; ; i++ {
		actx, cancel := context.WithTimeout(ctx, attemptWait)
		err = fn(actx)

		cancel()

		if ctx.Err() != nil && last != nil {
			// The attempt ctx cut short says less than the ones before it.
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), last)
		}

		last = err

		var p permanent
		if err == nil || errors.As(err, &p) || i == attempts {
			return err
		}

		logger.Warn(what+" failed; retrying", zap.Int("attempt", i), zap.Duration("in", wait), zap.Error(err))

		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %w)", what, ctx.Err(), err)
		case <-time.After(wait):
		}

		wait = min(2*wait, maxRetry)
	}
}
