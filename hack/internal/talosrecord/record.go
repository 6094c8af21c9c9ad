package talosrecord

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/image-factory/pkg/schematic"
	"github.com/siderolabs/talos/pkg/machinery/client"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/anvil-metal/anvil/internal/freeport"
	"github.com/anvil-metal/anvil/internal/labfactory"
)

// The recording's steps, in the order the machine goes through them.
const (
	StepMaintenanceBoot = "boot into maintenance"
	StepMaintenance     = "maintenance API"
	StepInstall         = "install"
	StepInstalledBoot   = "installed boot"
	StepInstalled       = "installed API"
	StepReset           = "reset"

	// stepAfter takes the events of the boot after the reset, which are not recorded.
	stepAfter = "after the reset"
)

// host is the recorder's host as the guest reaches it through QEMU's user network.
const host = "10.0.2.2"

// KernelArgs are the schematic's kernel arguments: the serial console (the factory's
// metal command line has only tty0), no dashboard on it (its redraws cost an emulated
// CPU), no IO-APIC timer check (a loaded host's emulated timer can fail it). The
// installed Talos boots the schematic's UKI, so they are its arguments too.
var KernelArgs = []string{"console=ttyS0", "talos.dashboard.disabled=1", "no_timer_check"}

// Bounds on the steps, under TCG on a loaded host.
const (
	bootWait    = 15 * time.Minute
	installWait = 25 * time.Minute
	resetWait   = 10 * time.Minute
	callWait    = 2 * time.Minute
	pollEvery   = 5 * time.Second
	// settle is how long events may keep coming after a step's last awaited one.
	settle = 20 * time.Second
)

// Options configure a recording.
type Options struct {
	// TalosAssets is make talos' output (_out/talos/assets).
	TalosAssets string
	// Out is the recording's file.
	Out string
	// Work holds the machine's disk, its consoles and the factory's files; a temporary
	// directory when empty. Removed at the end unless Keep.
	Work string
	Keep bool
	// QEMU is qemu-system-x86_64.
	QEMU string
	// Command is how the recording was made, written into it.
	Command string
	// Log gets the recorder's progress.
	Log io.Writer
}

// Record boots real Talos in QEMU, drives it from maintenance through its install, its
// installed boot and a reset, records what it answered and sent, and writes the
// recording to opts.Out. ctx bounds it; the VM, the servers and the work directory are
// gone when it returns, whatever happened.
func Record(ctx context.Context, opts Options) (err error) {
	r, err := newRecorder(ctx, opts)
	if err != nil {
		return err
	}

	defer r.close()

	defer func() {
		if err != nil && r.vm != nil {
			r.logf("the console's end (%s):\n%s", r.vm.console, r.vm.tail(40))
		}
	}()

	rec := &Recording{TalosVersion: r.talos.Version(), Recorder: opts.Command, Notes: notes}

	if err = r.run(ctx, rec); err != nil {
		// What was recorded up to the failure, to look at, never to replay.
		r.collect(rec)

		if serr := rec.Save(opts.Out + ".partial"); serr == nil {
			r.logf("what was recorded is in %s.partial", opts.Out)
		}

		return err
	}

	r.collect(rec)

	if err := rec.Save(opts.Out); err != nil {
		return err
	}

	r.logf("recorded in %s", opts.Out)

	return nil
}

// recorder is one recording's machine and servers.
type recorder struct {
	opts    Options
	start   time.Time
	work    string
	cleanup []func()

	talos     *labfactory.Talos
	factory   string // its URL on the host
	registry  string // as the guest reaches it
	sink      *Sink
	sinkAddr  string // as the guest reaches it
	apiPort   int
	spec      vmSpec
	vm        *vm
	boots     int
	schematic string
	manifest  string
	// actor is the reset's actor ID.
	actor string
}

func newRecorder(ctx context.Context, opts Options) (_ *recorder, err error) {
	r := &recorder{opts: opts, start: time.Now(), work: opts.Work}

	defer func() {
		if err != nil {
			r.close()
		}
	}()

	if r.work == "" {
		if r.work, err = os.MkdirTemp("", "talos-record-"); err != nil {
			return nil, fmt.Errorf("error making the work directory: %w", err)
		}
	} else if err = os.MkdirAll(r.work, 0o755); err != nil {
		return nil, fmt.Errorf("error making the work directory: %w", err)
	}

	if !opts.Keep {
		r.defer_(func() { os.RemoveAll(r.work) })
	}

	if r.talos, err = labfactory.NewTalos(opts.TalosAssets, filepath.Join(r.work, "factory")); err != nil {
		return nil, err //nolint:wrapcheck // names make talos
	}

	serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.defer_(stop)

	// The factory: schematics, real Talos' boot files and its installer images.
	factoryLis, err := listen()
	if err != nil {
		return nil, err
	}

	srv := &http.Server{Handler: labfactory.New(labfactory.WithTalos(r.talos)), ReadHeaderTimeout: 10 * time.Second}

	go srv.Serve(factoryLis) //nolint:errcheck // ends with Close below

	r.defer_(func() { srv.Close() })

	port := factoryLis.Addr().(*net.TCPAddr).Port //nolint:forcetypeassert // a TCP listener's
	r.factory = "http://" + factoryLis.Addr().String()
	r.registry = net.JoinHostPort(host, strconv.Itoa(port))

	// The event sink.
	sinkLis, err := listen()
	if err != nil {
		return nil, err
	}

	r.sink = NewSink(StepMaintenanceBoot)

	go r.sink.Serve(serveCtx, sinkLis) //nolint:errcheck // ends with the context

	r.sinkAddr = net.JoinHostPort(host, strconv.Itoa(sinkLis.Addr().(*net.TCPAddr).Port)) //nolint:forcetypeassert // a TCP listener's

	if r.apiPort, err = freeport.TCP(); err != nil {
		return nil, err //nolint:wrapcheck // says what failed
	}

	qemuLog, err := os.Create(filepath.Join(r.work, "qemu.log"))
	if err != nil {
		return nil, fmt.Errorf("error making QEMU's log: %w", err)
	}

	r.defer_(func() { qemuLog.Close() })

	disk := filepath.Join(r.work, "disk.raw")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		return nil, fmt.Errorf("error making the disk: %w", err)
	}

	if err := os.Truncate(disk, 8<<30); err != nil {
		return nil, fmt.Errorf("error sizing the disk: %w", err)
	}

	r.spec = vmSpec{qemu: opts.QEMU, disk: disk, apiPort: r.apiPort, log: qemuLog}

	r.defer_(func() { r.vm.stop() })

	return r, nil
}

// defer_ runs fn when the recorder closes, the last added first.
func (r *recorder) defer_(fn func()) { r.cleanup = append(r.cleanup, fn) }

func (r *recorder) close() {
	for i := len(r.cleanup) - 1; i >= 0; i-- {
		r.cleanup[i]()
	}

	r.cleanup = nil
}

func (r *recorder) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, "[%6s] %s\n", time.Since(r.start).Round(time.Second), fmt.Sprintf(format, args...))
	}
}

func listen() (net.Listener, error) {
	var lc net.ListenConfig

	lis, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("error listening: %w", err)
	}

	return lis, nil
}

// run drives the machine through its steps and returns the recording.
func (r *recorder) run(ctx context.Context, rec *Recording) error {
	version := r.talos.Version()

	if err := r.registerSchematic(ctx, version); err != nil {
		return err
	}

	cfgs, err := MakeConfigs(Params{Version: version, Schematic: r.schematic, Registry: r.registry, Sink: r.sinkAddr})
	if err != nil {
		return err
	}

	// 1. The network boot: Talos with no config, in maintenance.
	kernel, initrd, cmdline, err := r.bootFiles(ctx, version)
	if err != nil {
		return err
	}

	if err := r.boot(kernel, initrd, cmdline); err != nil {
		return err
	}

	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // maintenance mode: a self-signed certificate, as talosctl --insecure
	if err := r.waitStage(ctx, insecure, bootWait, runtimeres.MachineStageMaintenance); err != nil {
		return err
	}

	r.settle(ctx, StepMaintenanceBoot, "machine status MAINTENANCE")

	// 2. The maintenance API.
	r.sink.Step(StepMaintenance)

	calls, err := r.calls(ctx, insecure, func(ctx context.Context, c *client.Client) []Call {
		return Maintenance(ctx, c, cfgs, r.schematic, r.manifest)
	})
	if err != nil {
		return err
	}

	rec.Steps = append(rec.Steps, Step{Name: StepMaintenanceBoot}, Step{Name: StepMaintenance, Calls: calls})

	// 3. The install: the machine config applied as Omni applies it.
	r.sink.Step(StepInstall)

	install, err := r.calls(ctx, insecure, func(ctx context.Context, c *client.Client) []Call { return []Call{Install(ctx, c, cfgs)} })
	if err != nil {
		return err
	}

	if install[0].Code != "OK" {
		return fmt.Errorf("the machine config was refused: %s: %s", install[0].Code, install[0].Message)
	}

	rec.Steps = append(rec.Steps, Step{Name: StepInstall, Calls: install})

	r.logf("config applied; installing (a few minutes under TCG)")

	if err := r.waitReboot(ctx, installWait); err != nil {
		return err
	}

	// 4. The installed boot, then the installed API with the cluster's certificate.
	r.sink.Step(StepInstalledBoot)

	if err := r.bootDiskIfDown(); err != nil {
		return err
	}

	// The installed boot stays at stage booting in the lab: its boot sequence's last task
	// waits for etcd and the kubelet to be up (BootTimeout, 70 minutes), whose images the
	// lab has not. Its API answers once it runs on its STATE's config, and the boot
	// sequence has started every service then: what Omni's non-graceful reset of a
	// booting machine finds.
	if err := r.waitStage(ctx, cfgs.ClientTLS, bootWait, runtimeres.MachineStageBooting, runtimeres.MachineStageRunning); err != nil {
		return err
	}

	r.settle(ctx, StepInstalledBoot, "task startAllServices START")

	r.sink.Step(StepInstalled)

	calls, err = r.calls(ctx, cfgs.ClientTLS, func(ctx context.Context, c *client.Client) []Call {
		return Installed(ctx, c, cfgs, r.schematic, r.manifest)
	})
	if err != nil {
		return err
	}

	rec.Steps = append(rec.Steps, Step{Name: StepInstalledBoot}, Step{Name: StepInstalled, Calls: calls})

	// 5. Omni's reset.
	r.sink.Step(StepReset)

	reset, err := r.calls(ctx, cfgs.ClientTLS, func(ctx context.Context, c *client.Client) []Call {
		call, a := ResetActor(ctx, c)
		r.actor = a

		return []Call{call}
	})
	if err != nil {
		return err
	}

	rec.Steps = append(rec.Steps, Step{Name: StepReset, Calls: reset})

	r.logf("reset asked (%s); waiting for the machine to go down", reset[0].Code)

	if err := r.waitReboot(ctx, resetWait); err != nil {
		return err
	}

	// A moment for what the sink is still being sent, then nothing more: a kexec'd
	// machine's next boot is not the reset's.
	time.Sleep(2 * time.Second)
	r.sink.Step(stepAfter)

	r.logf("done")

	return nil
}

// steps are the recording's steps in order.
var steps = []string{StepMaintenanceBoot, StepMaintenance, StepInstall, StepInstalledBoot, StepInstalled, StepReset}

// collect puts the sink's events into the recording's steps, adding the steps that had
// events but no calls yet (a run that failed).
func (r *recorder) collect(rec *Recording) {
	for _, name := range steps {
		reqs := r.sink.Events(name)
		if rec.Step(name) == nil {
			if len(reqs) == 0 {
				continue
			}

			rec.Steps = append(rec.Steps, Step{Name: name})
		}

		st := rec.Step(name)
		for _, req := range reqs {
			st.Events = append(st.Events, NormalizeEvent(req, r.actor))
		}
	}
}

// notes say, in the recording, how it was made.
var notes = []string{
	"QEMU/TCG with user-mode networking: the recorder reaches the API through a port forwarded from 127.0.0.1, Talos the recorder's event sink and the factory's registry at 10.0.2.2.",
	"Maintenance calls are made with no client certificate (talosctl --insecure) from outside SideroLink, so Talos gives them the Reader role: MetaWrite, MetaDelete, Read and Reset are refused there. Over SideroLink (Omni) they would run as Admin.",
	"The machine config is a control plane's (the machine CA's key signs the API certificate; a worker would need a control plane's trustd) with time sync disabled. The lab has no Kubernetes images, so etcd and the kubelet never come up: the installed boot sequence waits for them (70 minutes) at stage booting, never running, and the installed calls and the reset are made there, as Omni's non-graceful reset of a booting machine is.",
	"Event data drop what varies from run to run: node names, addresses, actor IDs (Actor says whose), services' messages and health.",
}

// registerSchematic registers the schematic the machine boots (KernelArgs) with the
// factory.
func (r *recorder) registerSchematic(ctx context.Context, version string) error {
	var sc schematic.Schematic

	sc.Customization.ExtraKernelArgs = KernelArgs

	doc, err := sc.Marshal()
	if err != nil {
		return fmt.Errorf("error encoding the schematic: %w", err)
	}

	body, err := r.http(ctx, http.MethodPost, "/schematics", doc)
	if err != nil {
		return err
	}

	if r.schematic, err = sc.ID(); err != nil {
		return fmt.Errorf("error computing the schematic's ID: %w", err)
	}

	if !strings.Contains(string(body), r.schematic) {
		return fmt.Errorf("the factory registered the schematic as %s, not %s", body, r.schematic)
	}

	manifest, err := r.http(ctx, http.MethodGet, "/schematics/"+r.schematic, nil)
	if err != nil {
		return err
	}

	r.manifest = string(manifest)

	r.logf("Talos %s, schematic %s", version, r.schematic)

	return nil
}

// bootFiles fetches the schematic's kernel and initramfs from the factory and makes the
// factory's kernel command line with the event sink on it.
func (r *recorder) bootFiles(ctx context.Context, version string) (kernel, initrd, cmdline string, err error) {
	base := "/image/" + r.schematic + "/" + version + "/"

	for _, f := range []struct {
		name string
		path *string
	}{{"kernel-amd64", &kernel}, {"initramfs-amd64.xz", &initrd}} {
		b, err := r.http(ctx, http.MethodGet, base+f.name, nil)
		if err != nil {
			return "", "", "", err
		}

		*f.path = filepath.Join(r.work, f.name)
		if err := os.WriteFile(*f.path, b, 0o600); err != nil {
			return "", "", "", fmt.Errorf("error writing %s: %w", f.name, err)
		}
	}

	cmdline, err = labfactory.TalosCmdline(version, "metal", "amd64", append(append([]string{}, KernelArgs...), "talos.events.sink="+r.sinkAddr))
	if err != nil {
		return "", "", "", err //nolint:wrapcheck // names the argument
	}

	return kernel, initrd, cmdline, nil
}

func (r *recorder) http(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}

	req, err := http.NewRequestWithContext(ctx, method, r.factory+path, rd)
	if err != nil {
		return nil, fmt.Errorf("error making the factory request: %w", err)
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("error asking the factory for %s: %w", path, err)
	}

	defer resp.Body.Close()

	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("error reading the factory's %s: %w", path, err)
	}

	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("the factory answered %s with %s: %s", path, resp.Status, b)
	}

	return b, nil
}

// boot starts QEMU on the network kernel (kernel set) or the disk.
func (r *recorder) boot(kernel, initrd, cmdline string) error {
	r.boots++

	v, err := r.spec.start(filepath.Join(r.work, fmt.Sprintf("console-%d.log", r.boots)), kernel, initrd, cmdline)
	if err != nil {
		return err
	}

	r.vm = v

	what := "the disk"
	if kernel != "" {
		what = "the network kernel"
	}

	r.logf("QEMU started on %s (console %s, API 127.0.0.1:%d)", what, v.console, r.apiPort)

	return nil
}

// bootDiskIfDown boots the disk when the machine's reboot ended QEMU.
func (r *recorder) bootDiskIfDown() error {
	if !r.vm.exited() {
		return nil
	}

	return r.boot("", "", "")
}

// waitReboot waits for the machine to go down: QEMU ends (a reboot) or a kernel starts
// again in it (a kexec).
func (r *recorder) waitReboot(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	starts := r.vm.kernelStarts()

	for {
		switch {
		case r.vm.exited():
			r.logf("the machine rebooted (QEMU ended)")

			return nil
		case r.vm.kernelStarts() > starts:
			r.logf("the machine kexec'd into a new kernel")

			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("the machine did not go down within %s: %w", limit, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// client is a machinery client of the machine's API with tlsConf.
func (r *recorder) client(ctx context.Context, tlsConf *tls.Config) (*client.Client, error) {
	c, err := client.New(ctx, client.WithEndpoints(net.JoinHostPort("127.0.0.1", strconv.Itoa(r.apiPort))), client.WithTLSConfig(tlsConf.Clone()))
	if err != nil {
		return nil, fmt.Errorf("error making the machinery client: %w", err)
	}

	return c, nil
}

// waitStage waits until the API answers with tlsConf and the machine's status is at one
// of stages.
func (r *recorder) waitStage(ctx context.Context, tlsConf *tls.Config, limit time.Duration, stages ...runtimeres.MachineStage) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()

	for {
		if r.vm.exited() {
			return fmt.Errorf("QEMU ended while waiting for stage %v: %v", stages, r.vm.err)
		}

		stage, err := r.stage(ctx, tlsConf)
		if err == nil && slices.Contains(stages, stage) {
			r.logf("the machine is at stage %s", strings.ToLower(stage.String()))

			return nil
		}

		if err == nil {
			err = fmt.Errorf("stage %s", stage)
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("the machine was not at stage %v within %s: %w", stages, limit, err)
		case <-time.After(pollEvery):
		}
	}
}

// stage reads the machine's stage with tlsConf.
func (r *recorder) stage(ctx context.Context, tlsConf *tls.Config) (runtimeres.MachineStage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	c, err := r.client(ctx, tlsConf)
	if err != nil {
		return 0, err
	}

	defer c.Close()

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
	if err != nil {
		return 0, fmt.Errorf("reading the machine status: %w", err)
	}

	return ms.TypedSpec().Stage, nil
}

// settle waits for the step's event with the summary prefix, then for the events
// following it.
func (r *recorder) settle(ctx context.Context, step, prefix string) {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	if err := r.sink.WaitFor(wctx, step, func(s string) bool { return strings.HasPrefix(s, prefix) }); err != nil {
		r.logf("no %q event in step %q: %v", prefix, step, err)
	}

	select {
	case <-ctx.Done():
	case <-time.After(settle):
	}
}

// calls runs fn with a client of the machine's API.
func (r *recorder) calls(ctx context.Context, tlsConf *tls.Config, fn func(context.Context, *client.Client) []Call) ([]Call, error) {
	ctx, cancel := context.WithTimeout(ctx, callWait)
	defer cancel()

	c, err := r.client(ctx, tlsConf)
	if err != nil {
		return nil, err
	}

	defer c.Close()

	calls := fn(ctx, c)

	for _, call := range calls {
		r.logf("  %-55s %s %s", call.Name, call.Code, call.Message)
	}

	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("the calls took longer than %s: %w", callWait, errors.Join(err, errors.New(calls[len(calls)-1].Message)))
	}

	return calls, nil
}
