// Package lab brings a whole lab up and down: the network (labnet), the site DHCP
// server, the provider in standalone mode, the machines and, when asked for, a real Omni
// (omnilab). What it starts is recorded
// in a state file in the lab directory, so "down" stops it even after a crash; it also
// sweeps the namespaces' processes and the processes naming the lab directory.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/hack/internal/omnilab"
	"github.com/anvil-metal/anvil/internal/etcdtest"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// Config of a lab.
type Config struct {
	// Dir holds the state file, logs, the provider's state and the machines.
	Dir string
	// Prefix names the namespaces: <prefix>-lab, <prefix>-site.
	Prefix string

	Machines int
	// Firmware kinds, handed out to the machines in turn.
	Firmware []machine.Firmware
	// NICs are the machines' numbers of network ports, handed out in turn like Firmware
	// (empty: one each); a machine with more boots from its last (machine.Spec.NICs).
	NICs []int
	// TPM says, in turn like Firmware, which machines have a TPM 2.0 (swtpm, its state
	// kept in the machine's directory: machine.Spec.TPM); empty: none has.
	TPM []bool
	// DataDisks are each machine's disks beside its boot disk, in turn like Firmware
	// (machine.Spec.DataDisks); empty: none.
	DataDisks [][]machine.DataDisk
	// FullDHCP is a site without a DHCP server: the site namespace only advertises the
	// IPv6 router, and the provider runs in full DHCP mode, handing out the addresses
	// of labnet's range itself.
	FullDHCP bool
	// IPv6Only is an IPv6-only provisioning network: no IPv4 DHCP anywhere, router
	// advertisements that send the machines to DHCPv6, the provider advertising its
	// IPv6 address and serving DHCPv6 (its full mode) with the boot URLs; OVMF keeps its
	// IPv6 network boot.
	IPv6Only bool
	KVM      bool
	MemoryMB int
	// CPUs are each machine's virtual CPUs (0: machine.Spec's default, 2). Real Talos'
	// kernel runs with one: under TCG with two, its text patching (int3 breakpoints
	// while another vCPU runs the code) sometimes panics it as it boots.
	CPUs     int
	DiskSize string

	ProviderBin    string
	AgentAssetsDir string
	FactoryURL     string
	FactoryPXEURL  string
	APIPort        int
	// FactoryBin is the Image Factory stand-in (hack/cmd/lab-factory), run in the
	// provider's namespace on 10.77.0.1:8080 serving FactoryAssetsDir (the test "Talos",
	// hack/cmd/talos-standin, as the imager builds it; empty: no boot assets, schematics
	// and versions only); empty: no factory.
	FactoryBin       string
	FactoryAssetsDir string
	// TalosAssetsDir is real Talos (make talos: _out/talos/assets), which the factory
	// serves for its version beside the stand-in's; empty: the stand-in only.
	TalosAssetsDir string
	// FactoryExtensions are system extensions real Talos' schematics may name, by the
	// name the factory knows each by (anvil-metal/metal-agent): the OCI image layout of
	// each (make agent-extension: _out/agent-extension), which the factory unpacks and
	// lays over Talos as the Image Factory does an extension image from its registry.
	// Needs TalosAssetsDir.
	FactoryExtensions map[string]string
	// ProviderArgs are appended to the provider's command line (after the lab's own
	// power flags, which they may override).
	ProviderArgs []string

	// BMC is each machine's power owner, handed out in turn like Firmware; empty: none
	// (the provider never powers the machines, as the e2e flow of TestE2E wants).
	BMC []PowerOwner
	// UnregisteredBMC are the power owners whose BMCs the lab does not tell the provider
	// of: a test gives them another way (Omni's InfraMachineBMCConfig).
	UnregisteredBMC []PowerOwner
	// PowerBin is hack/cmd/lab-power: the power API daemon, run in the provider's
	// namespace on PowerAPIListen, and the chassis control program of the simulated
	// BMCs. Needed when a machine's owner is api or ipmi; empty: no power API.
	PowerBin string

	// Replicas, when 2 or more, runs a site of provider replicas instead of one provider
	// (lab up --ha: 3): each with an etcd member, in a namespace of its own on the
	// bridge, behind the site's address (labnet.VIP) that keepalived moves to a ready
	// one, with Omni too (the leader runs the adapter).
	Replicas int

	// OmniBin is a real Omni (make omni: _out/bin/omni), run in namespace <prefix>-omni on
	// 10.77.0.3 (hack/internal/omnilab) with the factory stand-in's Talos and Kubernetes
	// versions; empty: no Omni.
	OmniBin string
	// OmnictlBin is omnictl (make omni: _out/bin/omnictl): with Omni, the lab creates the
	// infra provider ProviderID with it, and the provider runs as Omni's infra provider.
	OmnictlBin string
}

// State is what a lab runs, as recorded in <dir>/state.json.
type State struct {
	Dir         string `json:"dir"`
	Prefix      string `json:"prefix"`
	ProviderNS  string `json:"providerNamespace"`
	SiteNS      string `json:"siteNamespace"`
	ProviderPID int    `json:"providerPid"`
	// ProviderCommand is the provider's command line as the lab last started it (the
	// binary's absolute path first; run in ProviderNS): RelaunchProvider starts it again
	// so, without the Config.
	ProviderCommand []string `json:"providerCommand,omitempty"`
	DHCPPID         int      `json:"dhcpPid"`
	// FullDHCP: the provider hands out the addresses; dnsmasq only advertises the router.
	FullDHCP bool `json:"fullDhcp,omitempty"`
	// IPv6Only: no IPv4 DHCP; the provider serves DHCPv6 and advertises its IPv6 address.
	IPv6Only   bool           `json:"ipv6Only,omitempty"`
	FactoryPID int            `json:"factoryPid,omitempty"`
	PowerPID   int            `json:"powerPid,omitempty"`
	Machines   []machine.Spec `json:"machines"`
	// BMCs are the machines' power owners, by machine name.
	BMCs map[string]*MachineBMC `json:"bmcs,omitempty"`
	// BMCPassword is the lab's administrator password on its simulated BMCs.
	BMCPassword string `json:"bmcPassword,omitempty"`
	// PowerBin is lab-power (absolute): the power API daemon and the simulated BMCs'
	// chassis program.
	PowerBin string `json:"powerBin,omitempty"`
	// KVM, MemoryMB and DiskSize are the machines' defaults as the lab was first
	// brought up (Config's), for machines added later (AddMachine).
	KVM      bool   `json:"kvm,omitempty"`
	MemoryMB int    `json:"memoryMB,omitempty"`
	CPUs     int    `json:"cpus,omitempty"`
	DiskSize string `json:"diskSize,omitempty"`

	// OmniNS is Omni's namespace, Omni what runs there; both empty without Omni.
	OmniNS string        `json:"omniNamespace,omitempty"`
	Omni   *omnilab.Omni `json:"omni,omitempty"`

	// Replicas are the site's provider replicas (Config.Replicas), none for one provider.
	Replicas []Replica `json:"replicas,omitempty"`
	// etcd is the site's etcd as this process started it.
	etcd *etcdtest.Cluster
}

// StateFile is the state file of the lab in dir.
func StateFile(dir string) string { return filepath.Join(dir, "state.json") }

// ProviderStateDir is the provider's --state-dir; its control socket is control.sock.
func (s *State) ProviderStateDir() string {
	if s.HA() {
		return s.ReplicaStateDir(0)
	}

	return filepath.Join(s.Dir, "provider")
}

// ControlSocket is the provider's control API socket (reachable from the host).
func (s *State) ControlSocket() string { return filepath.Join(s.ProviderStateDir(), "control.sock") }

// AdvertiseAddr is the address the provider tells machines to reach it at: its IPv6
// address on an IPv6-only lab network.
func (s *State) AdvertiseAddr() string {
	if s.IPv6Only {
		return labnet.ProviderAddr6
	}

	return labnet.ProviderAddr
}

// ProviderLog is the provider's output.
func (s *State) ProviderLog() string { return filepath.Join(s.Dir, "provider.log") }

// DHCPLog is dnsmasq's log.
func (s *State) DHCPLog() string { return filepath.Join(s.Dir, "dnsmasq.log") }

// FactoryLog is the Image Factory stand-in's output (one line per request).
func (s *State) FactoryLog() string { return filepath.Join(s.Dir, "factory.log") }

// Net is the lab's network.
func (s *State) Net() *labnet.Net {
	return &labnet.Net{ProviderNS: s.ProviderNS, SiteNS: s.SiteNS, OmniNS: s.OmniNS, ReplicaNS: labnet.New(s.Prefix).ReplicaNS}
}

// MachineList is the lab's machines.
func (s *State) MachineList() []*machine.Machine {
	ms := make([]*machine.Machine, 0, len(s.Machines))
	for _, spec := range s.Machines {
		ms = append(ms, machine.New(spec))
	}

	return ms
}

// Machine finds a machine by name, UUID or MAC.
func (s *State) Machine(name string) (*machine.Machine, error) {
	for _, m := range s.MachineList() {
		if m.Name == name || m.UUID == name || strings.EqualFold(m.MAC, name) {
			return m, nil
		}
	}

	return nil, fmt.Errorf("no machine %q in the lab at %s", name, s.Dir)
}

// Load reads the state of the lab in dir.
func Load(dir string) (*State, error) {
	b, err := os.ReadFile(StateFile(dir))
	if err != nil {
		return nil, fmt.Errorf("error reading the lab state: %w", err)
	}

	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("error decoding %s: %w", StateFile(dir), err)
	}

	return &s, nil
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("error encoding the lab state: %w", err)
	}

	// Readable by its owner only: it holds the BMC password, which the lab hands over
	// by files of mode 0600 (BMCPasswordFile, the BMCs' own configuration) and never
	// shows. A stale temporary file is removed first, or it would keep its mode.
	tmp := StateFile(s.Dir) + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("error writing the lab state: %w", err)
	}

	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("error writing the lab state: %w", err)
	}

	return os.Rename(tmp, StateFile(s.Dir))
}

// Up brings the lab up; what already runs is kept. The state is saved after each step,
// so a failure half-way leaves a lab that Down removes.
func Up(ctx context.Context, cfg Config) (*State, error) {
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("error resolving %s: %w", cfg.Dir, err)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("error creating %s: %w", dir, err)
	}

	s, err := Load(dir)
	if err != nil {
		n := labnet.New(cfg.Prefix)
		s = &State{
			Dir: dir, Prefix: cfg.Prefix, ProviderNS: n.ProviderNS, SiteNS: n.SiteNS,
			KVM: cfg.KVM, MemoryMB: cfg.MemoryMB, CPUs: cfg.CPUs, DiskSize: cfg.DiskSize,
		}
	} else if s.Prefix != cfg.Prefix {
		return nil, fmt.Errorf("the lab in %s has prefix %q, not %q: bring it down first", dir, s.Prefix, cfg.Prefix)
	}

	if cfg.PowerBin != "" {
		if s.PowerBin, err = filepath.Abs(cfg.PowerBin); err != nil {
			return nil, fmt.Errorf("error resolving %s: %w", cfg.PowerBin, err)
		}
	}

	if s.BMCPassword == "" {
		if s.BMCPassword, err = newPassword(); err != nil {
			return nil, err
		}
	}

	if err := s.save(); err != nil {
		return nil, err
	}

	if err := s.Net().Up(); err != nil {
		return s, err
	}

	if !proc.Alive(s.DHCPPID) {
		if err := labnet.PrepareDHCP(dir); err != nil {
			return s, err
		}

		s.FullDHCP, s.IPv6Only = cfg.FullDHCP, cfg.IPv6Only

		site := labnet.SiteDHCP

		switch {
		case s.IPv6Only:
			site = labnet.SiteIPv6
		case s.FullDHCP:
			site = labnet.SiteRouter
		}

		cmd := s.Net().DHCPCommand(context.WithoutCancel(ctx), dir, site)
		if s.DHCPPID, err = proc.StartDaemon(cmd, filepath.Join(dir, "dnsmasq.out")); err != nil {
			return s, fmt.Errorf("error starting dnsmasq: %w", err)
		}

		if err := s.save(); err != nil {
			return s, err
		}
	}

	if cfg.FactoryBin != "" && !proc.Alive(s.FactoryPID) {
		if err := s.startFactory(ctx, cfg); err != nil {
			return s, err
		}
	}

	if cfg.PowerBin != "" && !proc.Alive(s.PowerPID) {
		if err := s.startPowerAPI(ctx, cfg); err != nil {
			return s, err
		}
	}

	// Before the provider, which may be told to join it.
	if cfg.OmniBin != "" && !s.Omni.Running() {
		if err := s.startOmni(ctx, cfg); err != nil {
			return s, err
		}
	}

	switch {
	case cfg.Replicas > 0:
		if !s.HA() {
			if err := s.startSite(ctx, cfg); err != nil {
				return s, err
			}
		}
	case !proc.Alive(s.ProviderPID):
		if err := s.startProvider(ctx, cfg); err != nil {
			return s, err
		}
	}

	if err := s.addMachines(cfg); err != nil {
		return s, err
	}

	if err := s.registerBMCs(ctx); err != nil {
		return s, err
	}

	for _, m := range s.MachineList() {
		if err := s.startMachine(ctx, m); err != nil {
			return s, err
		}
	}

	return s, nil
}

// Down stops everything the lab in dir started and removes its namespaces. prefix is
// used when the state file is gone. It is safe to run again.
func Down(ctx context.Context, dir, prefix string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("error resolving %s: %w", dir, err)
	}

	s, err := Load(dir)
	if err != nil {
		// Every namespace a lab of this prefix may have, Omni's too.
		n := labnet.New(prefix)
		s = &State{Dir: dir, Prefix: prefix, ProviderNS: n.ProviderNS, SiteNS: n.SiteNS, OmniNS: n.OmniNS}
	}

	var errs []error

	// The power owners first, so that nothing powers a machine on again while the lab
	// stops it.
	errs = append(errs, proc.Stop(ctx, s.PowerPID, 5*time.Second))

	for _, b := range s.BMCs {
		if b != nil {
			errs = append(errs, proc.Stop(ctx, b.PID, 5*time.Second))
		}
	}

	for _, m := range s.MachineList() {
		errs = append(errs, m.Stop(ctx))
	}

	errs = append(errs, s.stopSite(ctx)...)
	errs = append(errs, proc.Stop(ctx, s.ProviderPID, 10*time.Second), s.Omni.Halt(ctx),
		proc.Stop(ctx, s.DHCPPID, 5*time.Second), proc.Stop(ctx, s.FactoryPID, 5*time.Second))

	// The sweep: whatever still runs in the namespaces or names the lab directory.
	pids := Processes(dir)

	for _, ns := range s.Net().Namespaces() {
		nsPIDs, err := netns.PIDs(ns)
		errs = append(errs, err)
		pids = append(pids, nsPIDs...)
	}

	for _, pid := range pids {
		errs = append(errs, proc.Stop(ctx, pid, 5*time.Second))
	}

	errs = append(errs, s.Net().Down())

	// Omni's directory (its state, keys and certificates), also when the state file that
	// names it is gone.
	if err := os.RemoveAll(OmniDir(dir)); err != nil {
		errs = append(errs, fmt.Errorf("error removing Omni's directory: %w", err))
	}

	// Real Talos' per-schematic files the factory made (hundreds of MB each).
	if err := os.RemoveAll(filepath.Join(dir, factoryTalosDir)); err != nil {
		errs = append(errs, fmt.Errorf("error removing the factory's Talos files: %w", err))
	}

	// The BMC password's copies made for a user (WriteGiveBMC); the machines' logs stay.
	secrets := []string{s.BMCPasswordFile()}
	for _, m := range s.MachineList() {
		secrets = append(secrets, OmniBMCConfigFile(m))
	}

	for _, f := range secrets {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("error removing %s: %w", f, err))
		}
	}

	if err := errors.Join(errs...); err != nil {
		return err
	}

	if err := os.Remove(StateFile(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("error removing the lab state: %w", err)
	}

	return nil
}

// daemons are the programs the lab runs: each names the lab's directory in its
// arguments ("ip" is a daemon between ip netns exec and its exec of the program).
var daemons = []string{"qemu-system-*", "swtpm", "dnsmasq", "provider", "ip", "lab-factory", "lab-power", "ipmi_sim", "omni", "unshare", "etcd", "keepalived"}

// Processes lists the lab daemons that name the lab directory dir, whether or not its
// state file knows them.
func Processes(dir string) []int { return proc.FindByArg(filepath.Clean(dir)+"/", daemons...) }

// up names a process's state in the lab's status.
func up(ok bool) string {
	if ok {
		return "running"
	}

	return "stopped"
}

// WriteStatus prints what the lab runs.
func (s *State) WriteStatus(w io.Writer) error {
	var b strings.Builder

	fmt.Fprintf(&b, "lab %s (prefix %s)\n", s.Dir, s.Prefix)

	for _, ns := range s.Net().Namespaces() {
		fmt.Fprintf(&b, "namespace %-20s %s\n", ns, map[bool]string{true: "present", false: "absent"}[netns.Exists(ns)])
	}

	fmt.Fprintf(&b, "provider  pid %-8d %s  log %s  control unix://%s\n", s.ProviderPID, up(proc.Alive(s.ProviderPID)), s.ProviderLog(), s.ControlSocket())
	site := "site DHCP server and router"

	switch {
	case s.IPv6Only:
		site = "IPv6 router only, sending machines to DHCPv6: the provider's"
	case s.FullDHCP:
		site = "router only: the provider hands out the addresses"
	}

	fmt.Fprintf(&b, "dnsmasq   pid %-8d %s  log %s  (%s)\n", s.DHCPPID, up(proc.Alive(s.DHCPPID)), s.DHCPLog(), site)

	if s.FactoryPID != 0 {
		fmt.Fprintf(&b, "factory   pid %-8d %s  log %s  http://%s\n", s.FactoryPID, up(proc.Alive(s.FactoryPID)), s.FactoryLog(), FactoryListen)
	}

	if s.PowerPID != 0 {
		fmt.Fprintf(&b, "power API pid %-8d %s  log %s  http://%s\n", s.PowerPID, up(proc.Alive(s.PowerPID)), s.PowerLog(), PowerAPIListen)
	}

	if s.Omni != nil {
		writeOmniStatus(&b, s, up(s.Omni.Running()))
	}

	for _, m := range s.MachineList() {
		s.writeMachineStatus(&b, m)
	}

	_, err := io.WriteString(w, b.String())

	return err
}

// WriteMachineStatus prints machine m's lines of the lab's status: its QEMU, identity,
// memory, serial log and power owner.
func (s *State) WriteMachineStatus(w io.Writer, m *machine.Machine) error {
	var b strings.Builder

	s.writeMachineStatus(&b, m)

	_, err := io.WriteString(w, b.String())

	return err
}

func (s *State) writeMachineStatus(b *strings.Builder, m *machine.Machine) {
	fmt.Fprintf(b, "machine %-12s %-8s pid %-8d %s  uuid %s  mac %s  %s %s  %d MiB  serial log %s\n",
		m.Name, m.Firmware, m.PID(), up(m.Running()), m.UUID, strings.Join(m.MACs, ","), m.Vendor.Manufacturer, m.Vendor.Product,
		m.MemoryMB, m.SerialLog())

	if m.TPM {
		fmt.Fprintf(b, "  tpm: swtpm pid %d %s  state %s  log %s\n", m.TPMPID(), up(m.TPMPID() != 0), m.TPMStateDir(), m.TPMLog())
	}

	bmc := s.BMC(m.Name)

	elsewhere := ""
	if bmc.Elsewhere {
		elsewhere = fmt.Sprintf("  (the lab does not give it to the provider: lab machine bmc %s says how)", m.Name)
	}

	switch bmc.Owner {
	case OwnerIPMI:
		fmt.Fprintf(b, "  power: ipmi_sim pid %d %s  lan %s:%d  user %s  log %s%s\n", bmc.PID, up(proc.Alive(bmc.PID)),
			labnet.ProviderAddr, bmc.LANPort, LabBMCUser, filepath.Join(m.Dir, "bmc", "ipmi_sim.log"), elsewhere)
	default:
		fmt.Fprintf(b, "  power: %s%s\n", bmc.Owner, elsewhere)
	}
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("error reading %s: %w", src, err)
	}

	if err := os.WriteFile(dst, b, 0o644); err != nil { //nolint:gosec // the lab's own paths
		return fmt.Errorf("error writing %s: %w", dst, err)
	}

	return nil
}
