package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/siderolink/api/events"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/meta"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/anvil-metal/anvil/internal/bootparams"
	"github.com/anvil-metal/anvil/internal/initsys"
	"github.com/anvil-metal/anvil/internal/labfactory"
	"github.com/anvil-metal/anvil/internal/maintenance"
	"github.com/anvil-metal/anvil/internal/siderolink"
)

// rebootDelay lets the answer that made the machine go down reach its caller, and the
// disk settle, before the reboot.
const rebootDelay = 3 * time.Second

// omniTalos is the stand-in as Talos beside Omni: it joins SideroLink with its node
// unique token and serves Talos' API there. Booted from the network it is Talos in
// maintenance: Omni's config applied makes it install itself on the disk (the factory's
// disk image and its saved state) and report the install as Talos does. Booted from its
// disk with a config, it is installed Talos, running: its API asks for the cluster's
// client certificates, and a reset forgets the config and reboots, into maintenance.
type omniTalos struct {
	logger *zap.Logger
	out    io.Writer
	pid1   bool

	uuid      string
	disk      disk
	join      joinArgs
	token     string
	schematic string
	manifest  string
	version   string
	// factory is the image factory's base URL, for the disk image.
	factory string
	// config is the applied machine config, nil in maintenance.
	config []byte

	installing sync.Once
	// rebooting makes one reboot of many asks (Omni retries a reset until it sees it).
	rebooting sync.Once
	// mu orders the writes of the saved state (a config applied, a reset).
	mu sync.Mutex
}

// runOmni runs the stand-in beside Omni until the machine goes down. installed says it
// booted from its disk: its saved state, then, is what it is.
func runOmni(ctx context.Context, logger *zap.Logger, out io.Writer, args map[string]string, installed bool) error {
	t := &omniTalos{logger: logger, out: out, pid1: initsys.IsPID1(), factory: args[labfactory.FactoryArg]}

	var err error

	if t.uuid, err = machineUUID("/sys/class/dmi/id/product_uuid"); err != nil {
		return err
	}

	if t.disk, err = firstDisk("/sys/block"); err != nil {
		return err
	}

	if installed {
		s, err := readSaved(t.disk)

		switch {
		case err != nil:
			return err
		case s == nil:
			return errors.New("booted from a disk with no saved state: nothing was installed")
		}

		t.token, t.join, t.schematic, t.manifest, t.version, t.config = s.UniqueToken, s.Join, s.Schematic, s.SchematicManifest, s.Version, s.Config
		if t.factory == "" {
			t.factory = s.Factory
		}
	} else {
		t.join = joinArgs{API: args[bootparams.SideroLinkAPI], EventsSink: args[bootparams.EventsSink], KernelLog: args[bootparams.LoggingKernel]}
		t.schematic, t.version = args[labfactory.SchematicArg], args[labfactory.VersionArg]

		if t.token, err = siderolink.NewUniqueToken(physicalMACs("/sys/class/net")); err != nil {
			return err
		}

		if t.manifest, err = t.fetchManifest(ctx); err != nil {
			return err
		}
	}

	join, err := siderolink.ParseJoin(t.join.API, t.join.EventsSink, t.join.KernelLog)
	if err != nil {
		return fmt.Errorf("error reading Omni's join arguments: %w", err)
	}

	if join.API == nil {
		return errors.New("no siderolink.api: no Omni to join")
	}

	talos, err := t.talos()
	if err != nil {
		return err
	}

	srv, err := newAPI(ctx, talos, logger.Named("api"))
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "%s omni stage=%s schematic=%s version=%s\n", Prefix, strings.ToLower(talos.Stage.String()), t.schematic, t.version)

	addresses, onAddress := maintenance.Addresses()

	go srv.Follow(ctx, addresses)

	if join.EventsSink != "" {
		go t.announce(ctx, join.EventsSink, talos.Stage)
	}

	return siderolink.Run(ctx, siderolink.Options{
		API: join.API.Host, Insecure: join.API.Insecure, JoinToken: join.API.JoinToken,
		UUID: t.uuid, UniqueToken: t.token, TalosVersion: t.version,
		OnAddress: func(addr netip.Addr) {
			if addr.IsValid() {
				fmt.Fprintf(out, "%s omni joined address=%s\n", Prefix, addr)
			}

			onAddress(addr)
		},
		Logger: logger.Named("siderolink"),
	})
}

// talos is the machine as its API speaks for it: in maintenance, or installed and
// running on its config, whose machine CA the API's mutual TLS is of.
func (t *omniTalos) talos() (*maintenance.Talos, error) {
	talos := &maintenance.Talos{
		Version: t.version, Schematic: t.schematic, SchematicManifest: t.manifest, Factory: t.factory,
		Stage: runtimeres.MachineStageMaintenance, Apply: t.apply,
	}

	if t.config != nil {
		talos.Stage, talos.Apply, talos.Reset = runtimeres.MachineStageRunning, t.applyRunning, t.reset
		// Talos' installer leaves the STATE encryption config in META.
		talos.Meta = []uint8{meta.StateEncryptionConfig}

		var err error
		if talos.TLS, err = serverTLS(t.config, time.Now()); err != nil {
			return nil, err
		}
	}

	return talos, nil
}

// newAPI is Talos' API over a state of its own.
func newAPI(ctx context.Context, talos *maintenance.Talos, logger *zap.Logger) (*maintenance.Server, error) {
	st, err := maintenance.NewState(ctx)
	if err != nil {
		return nil, err //nolint:wrapcheck // says what failed
	}

	return maintenance.New(ctx, st, maintenance.Options{Talos: talos, Logger: logger}) //nolint:wrapcheck // says what failed
}

// apply takes Omni's config in maintenance, loaded and valid (the API checked it, as
// Talos' does). Omni's own maintenance documents (event sink, kernel log) carry no
// machine config: they are taken as they are. A machine config starts the install, once,
// which ends in the reboot into the installed system; staged, it waits for a reboot
// that never comes.
func (t *omniTalos) apply(_ context.Context, data []byte, mode machine.ApplyConfigurationRequest_Mode) error {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return fmt.Errorf("the configuration does not load: %w", err)
	}

	if cfg.RawV1Alpha1() == nil || mode == machine.ApplyConfigurationRequest_STAGED {
		fmt.Fprintf(t.out, "%s omni config documents=%d machine=%t mode=%s\n", Prefix, len(cfg.Documents()), cfg.RawV1Alpha1() != nil, mode)

		return nil
	}

	// The stand-in's installed API is of the config's machine CA: a control plane's
	// config carries its key (a worker's does not; real Talos asks a control plane's
	// trustd for its certificate).
	if _, err := serverTLS(data, time.Now()); err != nil {
		return err
	}

	t.installing.Do(func() {
		go t.install(data)
	})

	return nil
}

// applyRunning takes Omni's config on the installed machine, loaded, with a machine
// config and valid: saved, as Talos keeps its config in STATE, and in effect at once
// (the stand-in runs nothing it configures), or after the reboot asked for.
func (t *omniTalos) applyRunning(_ context.Context, data []byte, mode machine.ApplyConfigurationRequest_Mode) error {
	t.mu.Lock()
	defer t.mu.Unlock()

	s := &saved{UniqueToken: t.token, Config: data, Join: t.join, Schematic: t.schematic, SchematicManifest: t.manifest, Version: t.version, Factory: t.factory}
	if err := writeSaved(t.disk, s); err != nil {
		return err
	}

	t.config = data

	fmt.Fprintf(t.out, "%s omni config applied bytes=%d mode=%s\n", Prefix, len(data), mode)

	if mode == machine.ApplyConfigurationRequest_REBOOT { //nolint:staticcheck // deprecated in Talos' API, still taken
		go t.reboot()
	}

	return nil
}

// install writes the disk image and the saved state, tells Omni the install is done as
// Talos' installer does (its last event, the reboot it asks for), and reboots.
func (t *omniTalos) install(config []byte) {
	ctx := context.Background()

	err := func() error {
		if t.factory == "" {
			return fmt.Errorf("no %s on the kernel line: no disk image to install", labfactory.FactoryArg)
		}

		url := t.factory + "/image/" + t.schematic + "/" + t.version + "/" + labfactory.DiskImageFor(runtime.GOARCH)

		n, err := installImage(ctx, url, t.disk)
		if err != nil {
			return err
		}

		s := &saved{UniqueToken: t.token, Config: config, Join: t.join, Schematic: t.schematic, SchematicManifest: t.manifest, Version: t.version, Factory: t.factory}
		if err := writeSaved(t.disk, s); err != nil {
			return err
		}

		fmt.Fprintf(t.out, "%s omni installed disk=%s image_bytes=%d\n", Prefix, t.disk.dev, n)

		// The events of the standalone stand-in's install, real Talos' (Omni counts the
		// FATAL unix.Reboot at their end).
		for _, ev := range installEvents() {
			if err := t.publish(ctx, t.join.EventsSink, "", ev); err != nil {
				return err
			}
		}

		return nil
	}()
	if err != nil {
		t.logger.Error("install failed", zap.Error(err))
		fmt.Fprintf(t.out, "%s omni install failed: %v\n", Prefix, err)
	}

	t.reboot()
}

// fetchManifest reads the booted schematic's document from the factory, as a factory
// image carries it.
func (t *omniTalos) fetchManifest(ctx context.Context) (string, error) {
	if t.factory == "" || t.schematic == "" {
		return "", fmt.Errorf("no %s or %s on the kernel line: the schematic is unknown", labfactory.FactoryArg, labfactory.SchematicArg)
	}

	var doc []byte

	err := retry(ctx, t.logger, "schematic fetch", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.factory+"/schematics/"+t.schematic, nil)
		if err != nil {
			return permanent{err}
		}

		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}

		defer resp.Body.Close()

		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("schematic fetch: status %d", resp.StatusCode)
		}

		doc, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))

		return err
	})
	if err != nil {
		return "", fmt.Errorf("error fetching the schematic: %w", err)
	}

	return string(doc), nil
}

// reset forgets the config, as a reset wiping STATE does, keeping the node unique token
// (META), then reboots once the answer is out.
func (t *omniTalos) reset(ctx context.Context, req *machine.ResetRequest, actor string) error {
	t.mu.Lock()
	defer t.mu.Unlock()

	s := &saved{UniqueToken: t.token, Join: t.join, Schematic: t.schematic, SchematicManifest: t.manifest, Version: t.version, Factory: t.factory}
	if err := writeSaved(t.disk, s); err != nil {
		return err
	}

	fmt.Fprintf(t.out, "%s omni reset graceful=%t\n", Prefix, req.GetGraceful())

	// The reboot outlives the call that asked for it.
	ctx = context.WithoutCancel(ctx)

	go func() {
		// Talos says it is resetting: Omni waits for it to come back in maintenance.
		ctx, cancel := context.WithTimeout(ctx, rebootDelay)
		defer cancel()

		// As real Talos: the reset sequence's start under the reset's actor, then the
		// machine's status, ready, which no actor's.
		for _, ev := range []struct {
			actor string
			event proto.Message
		}{
			{actor, &machine.SequenceEvent{Sequence: "reset", Action: machine.SequenceEvent_START}},
			{"", &machine.MachineStatusEvent{Stage: machine.MachineStatusEvent_RESETTING, Status: &machine.MachineStatusEvent_MachineStatus{Ready: true}}},
		} {
			if err := t.publish(ctx, t.join.EventsSink, ev.actor, ev.event); err != nil {
				t.logger.Warn("a reset event was not sent", zap.Error(err))
			}
		}

		t.reboot()
	}()

	return nil
}

// reboot reboots the machine after rebootDelay (outside PID 1 it only says so).
func (t *omniTalos) reboot() {
	t.rebooting.Do(t.rebootNow)
}

func (t *omniTalos) rebootNow() {
	time.Sleep(rebootDelay)

	fmt.Fprintf(t.out, "%s omni rebooting\n", Prefix)

	if !t.pid1 {
		return
	}

	if err := initsys.Reboot(); err != nil {
		t.logger.Error("error rebooting", zap.Error(err))
	}
}

// announce tells Omni's sink what Talos tells it as it comes up: its stage (Omni's
// snapshot of the machine, which its reset waits on) and, installed, the start of its
// boot sequence, which Omni counts as the install done.
func (t *omniTalos) announce(ctx context.Context, sink string, stage runtimeres.MachineStage) {
	ev := &machine.MachineStatusEvent{
		Stage:  machine.MachineStatusEvent_MAINTENANCE,
		Status: &machine.MachineStatusEvent_MachineStatus{Ready: true},
	}

	if stage == runtimeres.MachineStageRunning {
		t.publishUntilDone(ctx, sink, "boot", &machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_START})

		ev.Stage = machine.MachineStatusEvent_RUNNING
	}

	t.publishUntilDone(ctx, sink, "stage "+strings.ToLower(ev.Stage.String()), ev)
}

// publishUntilDone publishes an event until the sink takes it or ctx ends.
func (t *omniTalos) publishUntilDone(ctx context.Context, sink, what string, event proto.Message) {
	for ctx.Err() == nil {
		err := t.publish(ctx, sink, "", event)
		if err == nil {
			fmt.Fprintf(t.out, "%s omni event %s sent\n", Prefix, what)

			return
		}

		t.logger.Warn("event not taken; again", zap.String("event", what), zap.Error(err))

		select {
		case <-ctx.Done():
		case <-time.After(maxRetry):
		}
	}
}

// publish sends one event to Omni's sink, as Talos does: plaintext gRPC over SideroLink,
// Omni telling the machine by its address there.
func (t *omniTalos) publish(ctx context.Context, sink, actor string, event proto.Message) error {
	if sink == "" {
		return errors.New("no event sink")
	}

	conn, err := grpc.NewClient(sink, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("error dialing the event sink: %w", err)
	}

	defer conn.Close()

	// anypb's type URL, type.googleapis.com/<full name>, as Talos' sink controller
	// sends it: Omni's sink knows the events by it.
	data, err := anypb.New(event)
	if err != nil {
		return fmt.Errorf("error encoding the event: %w", err)
	}

	return retry(ctx, t.logger, "event", func(ctx context.Context) error {
		_, err := events.NewEventSinkServiceClient(conn).Publish(ctx, &events.EventRequest{Data: data, Id: fmt.Sprintf("standin-%d", time.Now().UnixNano()), ActorId: actor})

		return err
	})
}

// machineUUID reads the SMBIOS UUID, as the agent reports it.
func machineUUID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("error reading the machine's UUID: %w", err)
	}

	return strings.ToLower(strings.TrimSpace(string(b))), nil
}

// physicalMACs lists the addresses of the NICs backed by a device (not lo, not
// tunnels), for the node unique token's fingerprint.
func physicalMACs(sysNet string) []net.HardwareAddr {
	entries, err := os.ReadDir(sysNet)
	if err != nil {
		return nil
	}

	var macs []net.HardwareAddr

	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(sysNet, e.Name(), "device")); err != nil {
			continue
		}

		b, err := os.ReadFile(filepath.Join(sysNet, e.Name(), "address"))
		if err != nil {
			continue
		}

		if mac, err := net.ParseMAC(strings.TrimSpace(string(b))); err == nil {
			macs = append(macs, mac)
		}
	}

	return macs
}
