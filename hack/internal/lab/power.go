package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/hack/internal/labnet"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/ipmisim"
	"github.com/anvil-metal/anvil/internal/netns"
	"github.com/anvil-metal/anvil/internal/proc"
)

// PowerOwner is who powers a lab machine; each machine has exactly one.
type PowerOwner string

// Power owners.
const (
	// OwnerNone: no BMC; the lab starts the machine and nobody tells the provider how
	// to power it (the zero value: the provider never powers such a machine).
	OwnerNone PowerOwner = ""
	// OwnerAPI: the lab's power API (hack/cmd/lab-power) on PowerAPIListen.
	OwnerAPI PowerOwner = "api"
	// OwnerIPMI: a simulated BMC of its own (ipmi_sim, internal/ipmisim) is the only way to its
	// power; the lab, too, powers it through that BMC.
	OwnerIPMI PowerOwner = "ipmi"
)

// ParsePowerOwner checks a power owner: api, ipmi or none.
func ParsePowerOwner(s string) (PowerOwner, error) {
	switch o := strings.TrimSpace(s); o {
	case "api", "ipmi":
		return PowerOwner(o), nil
	case "none", "":
		return OwnerNone, nil
	default:
		return "", fmt.Errorf("unknown power owner %q (api, ipmi or none)", s)
	}
}

func (o PowerOwner) String() string {
	if o == OwnerNone {
		return "none"
	}

	return string(o)
}

// PowerAPIListen is where the lab's power API listens, in the provider's namespace.
const PowerAPIListen = labnet.ProviderAddr + ":8090"

// Ports of the lab's simulated BMCs, by machine index, in the provider's namespace: the
// LAN on the bridge address, the VM serial port on loopback (ipmisim.SerialAddr).
const (
	BMCLANPortBase    = 62300
	BMCSerialPortBase = 62600
)

// LabBMCUser is the lab's own administrator on every simulated BMC (slot 2), as a
// site's BMCs come with one; the provider is never told it (the agent provisions the
// provider's user in-band).
const LabBMCUser = "admin"

// MachineBMC is a machine's power owner and, for a simulated BMC, what runs it.
type MachineBMC struct {
	Owner PowerOwner `json:"owner"`
	// LANPort (on labnet.ProviderAddr) and SerialPort (on loopback) of the simulated BMC.
	LANPort    int `json:"lanPort,omitempty"`
	SerialPort int `json:"serialPort,omitempty"`
	// PID is ipmi_sim's.
	PID int `json:"pid,omitempty"`
	// Registered: the provider was told this BMC. Not told again: a second SetBMC
	// would replace the credentials the agent provisioned.
	Registered bool `json:"registered,omitempty"`
	// Elsewhere: the lab never tells the provider this BMC; it is given another way, as
	// a user gives a real one (anvilctl machine bmc set, Omni's InfraMachineBMCConfig:
	// WriteGiveBMC says how).
	Elsewhere bool `json:"elsewhere,omitempty"`
}

// BMC is the power owner of the machine named name (none when unknown).
func (s *State) BMC(name string) MachineBMC {
	if b, ok := s.BMCs[name]; ok && b != nil {
		return *b
	}

	return MachineBMC{}
}

// PowerLog is the power API's log (one line per request).
func (s *State) PowerLog() string { return filepath.Join(s.Dir, "power.log") }

// BMCLog is the log of machine m's simulated BMC (ipmi_sim's): sessions, chassis
// changes.
func (s *State) BMCLog(m *machine.Machine) string {
	c := s.BMCConfig(m, "")

	return c.Log()
}

// BMCConfig is the simulated BMC of machine m; powerBin is lab-power, its chassis
// control program.
func (s *State) BMCConfig(m *machine.Machine, powerBin string) ipmisim.Config {
	b := s.BMC(m.Name)

	return ipmisim.Config{
		Name: m.Name, Dir: filepath.Join(m.Dir, "bmc"),
		GUID:    strings.ReplaceAll(m.UUID, "-", ""),
		LANAddr: labnet.ProviderAddr, LANPort: b.LANPort, SerialPort: b.SerialPort,
		Users: []ipmisim.User{
			// The anonymous slot, present and disabled as on most BMCs.
			{ID: 1, Name: "", Password: "", Privilege: "user"},
			{ID: 2, Enabled: true, Name: LabBMCUser, Password: s.BMCPassword, Privilege: "admin"},
		},
		ChassisCommand: []string{powerBin, "chassis", "--dir", s.Dir, "--machine", m.Name},
	}
}

// BMCClient powers machine m through its simulated BMC, as the lab's administrator.
func (s *State) BMCClient(m *machine.Machine) *ipmisim.Client {
	return &ipmisim.Client{
		NetNS: s.ProviderNS, Addr: labnet.ProviderAddr, Port: s.BMC(m.Name).LANPort,
		User: LabBMCUser, Password: s.BMCPassword,
	}
}

// Power is how a machine's power is reached: the method set of the power API's
// machines (powerapi.Machine).
type Power interface {
	Running() bool
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Reset(ctx context.Context) error
	SetNextBootNetwork(on bool) error
}

// Power is the way to machine m's power that keeps it to one owner: through its BMC
// when it has a simulated one, else QEMU directly.
func (s *State) Power(m *machine.Machine) Power {
	if s.BMC(m.Name).Owner == OwnerIPMI {
		return s.BMCClient(m)
	}

	return m
}

// startPowerAPI runs hack/cmd/lab-power in the provider's namespace and waits until it
// listens (it logs "serving" once its socket is bound).
func (s *State) startPowerAPI(ctx context.Context, cfg Config) error {
	bin, err := filepath.Abs(cfg.PowerBin)
	if err != nil {
		return fmt.Errorf("error resolving %s: %w", cfg.PowerBin, err)
	}

	cmd := netns.Command(context.WithoutCancel(ctx), s.ProviderNS, bin, "serve", "--dir", s.Dir, "--listen", PowerAPIListen)
	if s.PowerPID, err = proc.StartDaemon(cmd, s.PowerLog()); err != nil {
		return fmt.Errorf("error starting the power API: %w", err)
	}

	if err := s.save(); err != nil {
		return err
	}

	return waitLog(ctx, s.PowerPID, s.PowerLog(), "lab-power: serving", "the power API", 30*time.Second)
}

// waitLog waits until log holds line, while pid lives.
func waitLog(ctx context.Context, pid int, log, line, what string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)

	for {
		if b, err := os.ReadFile(log); err == nil && strings.Contains(string(b), line) {
			return nil
		}

		if !proc.Alive(pid) {
			return fmt.Errorf("%s exited; see %s", what, log)
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up in %s; see %s", what, timeout, log)
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startBMC writes machine m's simulated BMC's config and runs its ipmi_sim in the
// provider's namespace, unless it runs.
func (s *State) startBMC(ctx context.Context, m *machine.Machine) error {
	b := s.BMCs[m.Name]
	if proc.Alive(b.PID) {
		return nil
	}

	if s.PowerBin == "" {
		return fmt.Errorf("the simulated BMC of %s needs the lab's power binary (hack/cmd/lab-power)", m.Name)
	}

	sim := s.BMCConfig(m, s.PowerBin)

	var err error

	if b.PID, err = ipmisim.StartDaemon(sim, s.ProviderNS); err != nil {
		return fmt.Errorf("error starting the BMC of %s: %w", m.Name, err)
	}

	// Saved before the wait: a BMC that never listens is still the lab's to stop.
	if err := s.save(); err != nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, ipmisim.ListenTimeout)
	defer cancel()

	return ipmisim.WaitListening(wctx, b.PID, sim.LANAddr, sim.LANPort)
}

// registerBMCs tells the provider, through its control socket, how to reach each
// machine's power that it was not told yet, as a user supplies BMC details: the power
// API's URL, or the simulated BMC's address and port without credentials (the agent
// provisions them in-band after acceptance). A BMC given elsewhere is not told.
func (s *State) registerBMCs(ctx context.Context) error {
	var reqs []*controlv1.SetBMCRequest

	var names []string

	for _, m := range s.MachineList() {
		b := s.BMCs[m.Name]
		if b == nil || b.Registered || b.Elsewhere || b.Owner == OwnerNone {
			continue
		}

		req := &controlv1.SetBMCRequest{MachineId: m.UUID, Kind: string(b.Owner)}

		switch b.Owner {
		case OwnerAPI:
			req.Address = "http://" + PowerAPIListen
		case OwnerIPMI:
			req.Address, req.Port = labnet.ProviderAddr, uint32(b.LANPort) //nolint:gosec // BMCLANPortBase + a machine's index
		}

		reqs, names = append(reqs, req), append(names, m.Name)
	}

	if len(reqs) == 0 {
		return nil
	}

	socket := s.liveControlSocket()
	if socket == "" {
		socket = s.ControlSocket() // the dial's error says which
	}

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("error connecting to the provider's control socket: %w", err)
	}
	defer conn.Close()

	client := controlv1.NewTransitionServiceClient(conn)

	for i, req := range reqs {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := client.SetBMC(cctx, req)

		cancel()

		if err != nil {
			return fmt.Errorf("error registering the BMC of %s with the provider: %w", names[i], err)
		}

		s.BMCs[names[i]].Registered = true

		if err := s.save(); err != nil {
			return err
		}
	}

	return nil
}

// newPassword is a random password for the lab's BMC administrator.
func newPassword() (string, error) {
	b := make([]byte, 6) // "lab-" and 12 hex digits: the 16 bytes ipmisim allows
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("error generating the BMC password: %w", err)
	}

	return "lab-" + hex.EncodeToString(b), nil
}

// BuildPower builds hack/cmd/lab-power to bin, from the module at root.
func BuildPower(ctx context.Context, root, bin string) error {
	return goBuild(ctx, root, bin, "./hack/cmd/lab-power")
}
