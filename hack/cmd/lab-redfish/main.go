// Command lab-redfish runs the lab's Redfish service on its own: for one lab QEMU machine
// (-machine-dir), or for in-memory fake machines (-fake) so that Redfish clients outside
// the hack tree (the provider's power backend) can be tested against it.
//
// Once it serves it prints one JSON line on stdout: {"url", "http_url", "cert_pem"}.
// It stops on SIGINT, SIGTERM or when its stdin closes, so a test that starts it cannot
// leave it behind. With -fake, GET /fake/{uuid}/calls lists what each machine was asked
// to do and what it booted.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/hack/internal/diskimage"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/redfish"
)

type config struct {
	listen, httpListen string
	opts               redfish.Options
	resetTypes         string
	fake               string

	machineDir, machineName, seed, firmware, netdev, netns, tap, systemID string
	diskFirst, kvm, diskSystem                                            bool
}

func main() {
	var c config

	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "HTTPS listen address")
	flag.StringVar(&c.httpListen, "http-listen", "", "also serve plain HTTP here")
	flag.StringVar(&c.opts.Username, "username", "admin", "the account's user name (empty: no authentication)")
	flag.StringVar(&c.opts.Password, "password", "", "the account's password (default $LAB_REDFISH_PASSWORD)")
	flag.BoolVar(&c.opts.SessionOnly, "session-only", false, "refuse basic authentication")
	flag.BoolVar(&c.opts.NoSessions, "no-sessions", false, "no SessionService: basic authentication only")
	flag.StringVar(&c.resetTypes, "reset-types", "", "comma-separated reset types offered (default: all)")
	flag.BoolVar(&c.opts.NoResetAllowableValues, "no-reset-allowable-values", false, "do not list the reset types")
	flag.BoolVar(&c.opts.NoBootMode, "no-boot-mode", false, "no BootSourceOverrideMode")
	flag.StringVar(&c.fake, "fake", "", "fake machines: comma-separated [id=]uuid[:on]")
	flag.StringVar(&c.machineDir, "machine-dir", "", "the lab machine's directory")
	flag.StringVar(&c.machineName, "machine-name", "redfish-0", "the lab machine's name")
	flag.StringVar(&c.seed, "seed", "anvil", "the lab's seed (machine identity)")
	flag.StringVar(&c.firmware, "firmware", "bios", "bios, uefi or uefi-pxe")
	flag.StringVar(&c.netdev, "netdev", "", "QEMU -netdev of the NIC without id (empty: the tap)")
	flag.StringVar(&c.netns, "netns", "", "the namespace of the tap")
	flag.StringVar(&c.tap, "tap", "", "the machine's tap")
	flag.StringVar(&c.systemID, "system-id", "", "the lab machine's Redfish system id (default 1)")
	flag.BoolVar(&c.diskFirst, "disk-first", false, "boot the disk before the network")
	flag.BoolVar(&c.kvm, "kvm", false, "use KVM")
	flag.BoolVar(&c.diskSystem, "disk-system", false, "give a machine without a disk the lab's bootable disk system")
	flag.Parse()

	if c.opts.Password == "" {
		c.opts.Password = os.Getenv("LAB_REDFISH_PASSWORD")
	}

	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "lab-redfish:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if c.resetTypes != "" {
		c.opts.ResetTypes = strings.Split(c.resetTypes, ",")
	}

	mux := http.NewServeMux()

	switch {
	case c.fake != "" && c.machineDir != "":
		return errors.New("-fake and -machine-dir exclude each other")
	case c.fake != "":
		fakes, err := fakeSystems(c.fake)
		if err != nil {
			return err
		}

		c.opts.Systems = fakes
		mux.HandleFunc("GET /fake/{uuid}/calls", func(w http.ResponseWriter, r *http.Request) {
			for _, sys := range fakes {
				if f, ok := sys.Machine.(*redfish.FakeMachine); ok && strings.EqualFold(f.UUID(), r.PathValue("uuid")) {
					_ = json.NewEncoder(w).Encode(f.Calls())

					return
				}
			}

			http.NotFound(w, r)
		})
	case c.machineDir != "":
		sys, err := labSystem(ctx, c)
		if err != nil {
			return err
		}

		c.opts.Systems = []redfish.System{sys}
	default:
		return errors.New("-fake or -machine-dir is needed")
	}

	svc, err := redfish.New(c.opts)
	if err != nil {
		return err
	}

	mux.Handle("/redfish", svc)
	mux.Handle("/redfish/", svc)

	srv, err := redfish.Serve(ctx, mux, redfish.ServeOptions{HTTPSAddr: c.listen, HTTPAddr: c.httpListen})
	if err != nil {
		return err
	}

	if err := json.NewEncoder(os.Stdout).Encode(map[string]string{
		"url": srv.URL, "http_url": srv.HTTPURL, "cert_pem": string(srv.CertPEM),
	}); err != nil {
		srv.Close()

		return fmt.Errorf("error announcing the service: %w", err)
	}

	// Stdin closing is the starter going away.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)

		stop()
	}()

	<-ctx.Done()

	return srv.Close()
}

// fakeSystems parses "[id=]uuid[:on],…".
func fakeSystems(spec string) ([]redfish.System, error) {
	var systems []redfish.System

	for i, item := range strings.Split(spec, ",") {
		id, uuid, ok := strings.Cut(item, "=")
		if !ok {
			id, uuid = "", item
		}

		uuid, state, _ := strings.Cut(uuid, ":")
		if uuid == "" {
			return nil, fmt.Errorf("fake machine %d has no UUID", i+1)
		}

		systems = append(systems, redfish.System{
			ID:           id,
			Machine:      redfish.NewFakeMachine(uuid, fmt.Sprintf("fake-%d", i+1), state == "on"),
			Manufacturer: "Anvil",
			Model:        "Fake",
			SerialNumber: fmt.Sprintf("FAKE%04d", i+1),
		})
	}

	return systems, nil
}

func labSystem(ctx context.Context, c config) (redfish.System, error) {
	fw, err := machine.ParseFirmware(c.firmware)
	if err != nil {
		return redfish.System{}, err
	}

	dir, err := filepath.Abs(c.machineDir)
	if err != nil {
		return redfish.System{}, fmt.Errorf("error resolving %s: %w", c.machineDir, err)
	}

	m := machine.New(machine.Spec{
		Name: c.machineName, Seed: c.seed, Firmware: fw, Dir: dir,
		NetNS: c.netns, Tap: c.tap, Netdev: c.netdev, DiskFirst: c.diskFirst, KVM: c.kvm,
	})

	if c.diskSystem {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return redfish.System{}, fmt.Errorf("error creating %s: %w", dir, err)
		}

		if _, err := os.Stat(m.Disk()); errors.Is(err, os.ErrNotExist) {
			if err := diskimage.Make(ctx, m.Disk(), diskimage.Options{Machine: m.Name, Format: diskimage.QCOW2}); err != nil {
				return redfish.System{}, fmt.Errorf("error making the disk of %s: %w", m.Name, err)
			}
		}
	}

	return redfish.LabSystem(c.systemID, m), nil
}
