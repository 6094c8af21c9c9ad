// Command demo shows Anvil at work in the lab: it brings the lab up with three machines
// (BIOS, UEFI, UEFI's own PXE), shows each appear with its hardware, accepts them (the
// agents wipe their disks), allocates one to the stand-in Talos, shows it boot and report
// the install, and leaves the lab running for a look around. With --omni it tells the
// same story beside a real Omni, which decides (omni.go). Run it as root from the
// repository (make demo, make demo-omni).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/lab"
	"github.com/anvil-metal/anvil/hack/internal/machine"
)

// record is the part of 'anvilctl get machines -o json' the demo shows.
type record struct {
	ID      string `json:"id"`
	Machine struct {
		MACs     []string `json:"macs"`
		Firmware string   `json:"firmware"`
		Address  string   `json:"lastAddress"`
	} `json:"machine"`
	Intent struct {
		Acceptance string `json:"acceptance"`
	} `json:"intent"`
	Inventory *struct {
		System struct {
			Manufacturer, Product, Serial string
		} `json:"system"`
		CPUs []struct {
			Manufacturer, Model string
			Cores, Threads      int
		} `json:"cpus"`
		MemoryMiB int `json:"memoryMiB"`
		Disks     []struct {
			Name   string `json:"name"`
			Size   int64  `json:"size"`
			CDROM  bool   `json:"cdrom"`
			Model  string `json:"model"`
			Transp string `json:"transport"`
		} `json:"disks"`
		NICs []struct {
			Name   string `json:"name"`
			MAC    string `json:"mac"`
			Driver string `json:"driver"`
		} `json:"nics"`
	} `json:"inventory"`
	Status struct {
		InstalledAllocation string `json:"installedAllocation"`
		Handoff             *struct {
			LoadedAt string `json:"loadedAt"`
			Failure  string `json:"failure"`
		} `json:"handoff"`
		LastWipe *struct {
			Disks []struct {
				Device     string `json:"device"`
				Method     string `json:"method"`
				Skipped    string `json:"skipped"`
				DurationMs int    `json:"durationMs"`
			} `json:"disks"`
		} `json:"lastWipe"`
	} `json:"status"`
}

func main() {
	var (
		dir, prefix string
		n           int
		omni        bool
	)

	flag.StringVar(&dir, "dir", "_out/lab", "the lab's directory")
	flag.StringVar(&prefix, "prefix", "anvil", "the lab's namespace prefix")
	flag.IntVar(&n, "machines", 3, "machines (firmware in turn: bios, uefi, uefi-pxe)")
	flag.BoolVar(&omni, "omni", false, "beside a real Omni (make omni): Omni accepts the machines and makes a cluster of one; two machines")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	demo := func() error { return run(ctx, dir, prefix, n) }
	if omni {
		demo = func() error { return runOmni(ctx, dir, prefix) }
	}

	if err := demo(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		fmt.Fprintln(os.Stderr, "the lab is left as it is; tear it down with: go run ./hack/cmd/lab down")
		os.Exit(1)
	}
}

type demo struct {
	start    time.Time
	anvilctl string
	state    *lab.State
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) ctl(args ...string) (string, error) {
	out, err := exec.Command(d.anvilctl, append([]string{"--endpoint", "unix://" + d.state.ControlSocket()}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("anvilctl %s: %w: %s", strings.Join(args, " "), err, out)
	}

	return string(out), nil
}

func (d *demo) machines() (map[string]record, error) {
	out, err := d.ctl("get", "machines", "-o", "json")
	if err != nil {
		return nil, err
	}

	var list []record
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("decoding the machines: %w", err)
	}

	m := make(map[string]record, len(list))
	for _, r := range list {
		m[r.ID] = r
	}

	return m, nil
}

// until polls cond every second for up to 10 minutes.
func (d *demo) until(ctx context.Context, what string, cond func(map[string]record) (bool, error)) error {
	deadline := time.Now().Add(10 * time.Minute)

	for {
		ms, err := d.machines()
		if err != nil {
			return err
		}

		if ok, err := cond(ms); err != nil || ok {
			return err
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func run(ctx context.Context, dir, prefix string, n int) error {
	d := &demo{start: time.Now(), anvilctl: "_out/bin/anvilctl"}

	cfg := lab.Config{
		Dir: dir, Prefix: prefix, Machines: n,
		Firmware:    []machine.Firmware{machine.BIOS, machine.UEFI, machine.UEFIPXE},
		ProviderBin: "_out/bin/provider", AgentAssetsDir: "_out/agent",
		FactoryURL: "http://" + lab.FactoryListen, FactoryPXEURL: "http://" + lab.FactoryListen,
		APIPort:    50042,
		FactoryBin: "_out/bin/lab-factory", FactoryAssetsDir: "_out/talos-standin",
		// The lab's power API powers the machines, so the provider does (POWER: api on/off).
		BMC: []lab.PowerOwner{lab.OwnerAPI}, PowerBin: "_out/bin/lab-power",
		// Machines stay up a while after their wipe, their agents ready to kexec into Talos.
		ProviderArgs: []string{"--kexec-keep-warm", "10m"},
	}

	if err := prepare(ctx, d, cfg, dir, prefix); err != nil {
		return err
	}

	d.say("bringing the lab up in %s: site DHCP, the provider, the factory stand-in, %d QEMU machines (TCG: ~20–50 s to the agent)", dir, n)

	var err error
	if d.state, err = lab.Up(ctx, cfg); err != nil {
		return fmt.Errorf("%w (go run ./hack/cmd/lab down removes what was started)", err)
	}

	names := map[string]string{}

	for _, m := range d.state.MachineList() {
		names[m.UUID] = m.Name
		d.say("%s powered on: %s firmware, MAC %s, serial console %s", m.Name, m.Firmware, m.MAC, m.SerialLog())
	}

	// Each machine appears, then its inventory.
	shown := map[string]int{}

	err = d.until(ctx, "the machines to register", func(ms map[string]record) (bool, error) {
		for id, r := range ms {
			if shown[id] == 0 {
				shown[id] = 1
				d.say("%s PXE-booted the agent (%s, %s); waiting for its inventory", names[id], r.Machine.Firmware, r.Machine.Address)
			}

			if shown[id] == 1 && r.Inventory != nil {
				shown[id] = 2
				d.say("%s registered: %s", names[id], hardware(r))
			}
		}

		return countAt(shown, 2) == n, nil
	})
	if err != nil {
		return err
	}

	for _, m := range d.state.MachineList() {
		if _, err := d.ctl("machine", "accept", m.UUID); err != nil {
			return err
		}

		d.say("%s accepted: its agent wipes the disk", m.Name)
	}

	wiped := map[string]bool{}

	err = d.until(ctx, "the wipes", func(ms map[string]record) (bool, error) {
		for id, r := range ms {
			if !wiped[id] && r.Status.LastWipe != nil {
				wiped[id] = true

				var parts []string

				for _, disk := range r.Status.LastWipe.Disks {
					if disk.Skipped != "" {
						parts = append(parts, disk.Device+" skipped ("+disk.Skipped+")")
					} else {
						parts = append(parts, fmt.Sprintf("%s: %s, %d ms", disk.Device, disk.Method, disk.DurationMs))
					}
				}

				d.say("%s wiped: %s", names[id], strings.Join(parts, "; "))
			}
		}

		return len(wiped) == n, nil
	})
	if err != nil {
		return err
	}

	target := d.state.MachineList()[0]
	config := filepath.Join(dir, "demo-config.yaml")

	if err := os.WriteFile(config, []byte("version: v1alpha1\nmachine:\n  type: worker\n  token: demo\n"), 0o600); err != nil {
		return err
	}

	allocated := time.Now()

	// A Talos that reads talos.config.early (1.11 and later): it fetches its configuration
	// over HTTPS it verifies with the provider's CA.
	out, err := d.ctl("machine", "allocate", target.UUID, "--talos-version", "v1.13.0", "--extensions", "siderolabs/intel-ucode", "--config", config)
	if err != nil {
		return err
	}

	d.say("%s allocated: %s", target.Name, strings.TrimSpace(strings.TrimPrefix(out, "machine "+target.UUID+":")))
	d.say("%s: its agent, kept up after the wipe (--kexec-keep-warm), kexecs straight into the stand-in Talos from the provider's cache", target.Name)

	// Follow the stand-in on the serial console while waiting for the install.
	follow := newFollower(target.SerialLog())

	err = d.until(ctx, "the install", func(ms map[string]record) (bool, error) {
		for _, line := range follow.lines("TALOS-STANDIN") {
			if len(line) > 160 {
				line = line[:160] + "…"
			}

			d.say("%s console: %s", target.Name, line)
		}

		return ms[target.UUID].Status.InstalledAllocation != "", nil
	})
	if err != nil {
		return err
	}

	d.say("%s installed (reported by the stand-in's events), %s after the allocation; it now boots from its disk",
		target.Name, time.Since(allocated).Round(time.Second))

	if console, err := os.ReadFile(target.SerialLog()); err == nil && strings.Contains(string(console), " talos.config=https://") {
		d.say("%s fetched its configuration over HTTPS, verified with the provider's CA given in talos.config.early", target.Name)
	}

	if ms, err := d.machines(); err == nil {
		switch h := ms[target.UUID].Status.Handoff; {
		case h != nil && h.Failure != "":
			d.say("%s: the kexec failed (%s): it booted through its firmware instead", target.Name, h.Failure)
		case h != nil && h.LoadedAt != "":
			d.say("%s was handed to Talos by kexec: no reboot, no firmware, no PXE", target.Name)
		default:
			d.say("%s booted Talos through its firmware (PXE)", target.Name)
		}
	}

	sock := d.state.ControlSocket()
	fmt.Printf(`
The lab keeps running. Look around:
  _out/bin/anvilctl --endpoint unix://%s get machines
  _out/bin/anvilctl --endpoint unix://%s get machine %s -o yaml
  _out/bin/anvilctl --endpoint unix://%s get schematics
  go run ./hack/cmd/lab status
  go run ./hack/cmd/lab console                  # the web console at https://127.0.0.1:50043/ui/, while it runs
  less -R %s
  less %s   (provider)    %s   (factory)    %s   (dnsmasq)
Tear it down:
  go run ./hack/cmd/lab down
`, sock, sock, target.UUID, sock, target.SerialLog(), d.state.ProviderLog(), d.state.FactoryLog(), d.state.DHCPLog())

	return nil
}

func hardware(r record) string {
	inv := r.Inventory

	var cpus, disks, macs []string

	for _, c := range inv.CPUs {
		cpus = append(cpus, fmt.Sprintf("%s %s %dC/%dT", c.Manufacturer, c.Model, c.Cores, c.Threads))
	}

	for _, disk := range inv.Disks {
		if !disk.CDROM {
			disks = append(disks, fmt.Sprintf("%s %.1f GiB %s", disk.Name, float64(disk.Size)/(1<<30), disk.Transp))
		}
	}

	for _, nic := range inv.NICs {
		macs = append(macs, nic.MAC+" ("+nic.Driver+")")
	}

	return fmt.Sprintf("%s %s serial %s | CPU %s | %d MiB | disks %s | MACs %s",
		inv.System.Manufacturer, inv.System.Product, inv.System.Serial, strings.Join(cpus, ", "), inv.MemoryMiB,
		strings.Join(disks, ", "), strings.Join(macs, ", "))
}

func countAt(m map[string]int, v int) int {
	n := 0

	for _, x := range m {
		if x == v {
			n++
		}
	}

	return n
}

// follower returns the new lines of a growing file.
type follower struct {
	path   string
	offset int64
}

func newFollower(path string) *follower {
	f := &follower{path: path}
	if st, err := os.Stat(path); err == nil {
		f.offset = st.Size()
	}

	return f
}

func (f *follower) lines(containing string) []string {
	file, err := os.Open(f.path)
	if err != nil {
		return nil
	}

	defer file.Close()

	if _, err := file.Seek(f.offset, 0); err != nil {
		return nil
	}

	var out []string

	r := bufio.NewReader(file)

	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // a partial line is read again next time
		}

		f.offset += int64(len(line))

		if i := strings.Index(line, containing); i >= 0 {
			out = append(out, strings.TrimSpace(line[i:]))
		}
	}

	return out
}
