// Command lab-power is the lab's power tool, with two modes:
//
//	lab-power serve --dir <lab> --listen 10.77.0.1:8090
//	    serves the HTTP power API (hack/internal/powerapi), which the provider's api
//	    backend speaks, for the lab's machines, looked up by UUID in the lab's state on
//	    every request, so machines added later are found;
//	lab-power chassis --dir <lab> --machine <name> get|set …
//	    is a simulated BMC's chassis control program (internal/ipmisim): ipmi_sim
//	    runs it to power its machine, reset it and set its boot device.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/powerapi"
	"github.com/anvil-metal/anvil/internal/ipmisim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)

	err := run(ctx, os.Args[1:])

	stop()

	if err != nil {
		fmt.Fprintln(os.Stderr, "lab-power:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: lab-power serve|chassis [flags]")
	}

	fs := flag.NewFlagSet("lab-power "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "_out/lab", "the lab's directory (its state.json)")

	switch args[0] {
	case "serve":
		listen := fs.String("listen", lab.PowerAPIListen, "address to listen on")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}

		return serve(ctx, *dir, *listen)
	case "chassis":
		name := fs.String("machine", "", "the machine's name")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}

		return chassis(ctx, *dir, *name, fs.Args())
	default:
		return fmt.Errorf("unknown mode %q (serve or chassis)", args[0])
	}
}

func serve(ctx context.Context, dir, listen string) error {
	logger, err := zap.NewProduction()
	if err != nil {
		return fmt.Errorf("error creating the logger: %w", err)
	}

	defer logger.Sync() //nolint:errcheck // syncing stderr fails on terminals (EINVAL); nothing to do at exit

	// Read per request: the lab adds machines while this runs.
	lookup := func(uuid string) (powerapi.Machine, bool) {
		s, err := lab.Load(dir)
		if err != nil {
			logger.Warn("error reading the lab's state", zap.Error(err))

			return nil, false
		}

		m, err := s.Machine(uuid)
		if err != nil || m.UUID != uuid {
			return nil, false
		}

		// A machine without a power owner is nobody's to power; a simulated BMC's
		// machine is powered through that BMC, never beside it.
		if s.BMC(m.Name).Owner == lab.OwnerNone {
			logger.Info("refused: the machine has no power owner", zap.String("machine", uuid))

			return nil, false
		}

		return s.Power(m), true
	}

	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", listen, err)
	}

	srv := &http.Server{Handler: powerapi.Handler(lookup, logger), ReadHeaderTimeout: 10 * time.Second}

	log.Printf("lab-power: serving the power API of the lab in %s on http://%s", dir, listen) //nolint:gosec // its own flags

	errc := make(chan error, 1)

	go func() { errc <- srv.Serve(l) }()

	select {
	case err := <-errc:
		return fmt.Errorf("error serving the power API: %w", err)
	case <-ctx.Done():
	}

	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()

	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("error stopping the power API: %w", err)
	}

	<-errc //nolint:errcheck // ErrServerClosed, after Shutdown

	return nil
}

// chassis answers ipmi_sim for one machine; its stderr is ipmi_sim's log.
func chassis(ctx context.Context, dir, name string, args []string) error {
	s, err := lab.Load(dir)
	if err != nil {
		return err
	}

	m, err := s.Machine(name)
	if err != nil {
		return err
	}

	if owner := s.BMC(m.Name).Owner; owner != lab.OwnerIPMI {
		return fmt.Errorf("machine %s's power owner is %s, not a simulated BMC", m.Name, owner)
	}

	return ipmisim.Chassis(ctx, m.Name, m, args, os.Stdout, os.Stderr)
}
