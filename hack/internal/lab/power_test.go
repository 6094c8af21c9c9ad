package lab

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	controlv1 "github.com/anvil-metal/anvil/api/control/v1"
	"github.com/anvil-metal/anvil/hack/internal/machine"
	"github.com/anvil-metal/anvil/internal/ipmisim"
)

func TestParsePowerOwner(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in      string
		want    PowerOwner
		wantErr bool
	}{
		{"api", OwnerAPI, false},
		{" ipmi ", OwnerIPMI, false},
		{"none", OwnerNone, false},
		{"", OwnerNone, false},
		{"redfish", "", true},
	} {
		got, err := ParsePowerOwner(tc.in)
		if tc.wantErr {
			assert.Error(t, err, tc.in)

			continue
		}

		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}

	assert.Equal(t, "none", OwnerNone.String())
}

func TestAddMachinesBMC(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name      string
		bmc       []PowerOwner
		elsewhere []PowerOwner
		index     int
		want      MachineBMC
		ipmi      string
		fw        machine.Firmware
	}{
		{"zero value: no owner", nil, nil, 0, MachineBMC{Owner: OwnerNone}, "", ""},
		{"api", []PowerOwner{OwnerAPI}, nil, 2, MachineBMC{Owner: OwnerAPI}, "", ""},
		{"ipmi first", []PowerOwner{OwnerIPMI, OwnerAPI, OwnerAPI}, nil, 0, MachineBMC{Owner: OwnerIPMI, LANPort: 62300, SerialPort: 62600}, "127.0.0.1:62600", ""},
		{"api second", []PowerOwner{OwnerIPMI, OwnerAPI, OwnerAPI}, nil, 1, MachineBMC{Owner: OwnerAPI}, "", ""},
		{"in turn", []PowerOwner{OwnerIPMI, OwnerAPI, OwnerAPI}, nil, 3, MachineBMC{Owner: OwnerIPMI, LANPort: 62303, SerialPort: 62603}, "127.0.0.1:62603", ""},
		{"arm64 has no IPMI device: the power API", []PowerOwner{OwnerIPMI}, nil, 0, MachineBMC{Owner: OwnerAPI}, "", machine.ARM64},
		{"api given elsewhere", []PowerOwner{OwnerIPMI, OwnerAPI}, []PowerOwner{OwnerAPI}, 1, MachineBMC{Owner: OwnerAPI, Elsewhere: true}, "", ""},
		{"ipmi given elsewhere", []PowerOwner{OwnerIPMI, OwnerAPI}, []PowerOwner{OwnerIPMI}, 0, MachineBMC{Owner: OwnerIPMI, LANPort: 62300, SerialPort: 62600, Elsewhere: true}, "127.0.0.1:62600", ""},
		{"no owner, nothing to give", nil, []PowerOwner{OwnerNone}, 0, MachineBMC{Owner: OwnerNone}, "", ""},
	} {
		s := &State{Dir: t.TempDir(), Prefix: "t", PowerBin: "/bin/lab-power"}

		var firmware []machine.Firmware
		if tc.fw != "" {
			firmware = []machine.Firmware{tc.fw}
		}

		require.NoError(t, s.addMachines(Config{Machines: tc.index + 1, Firmware: firmware, BMC: tc.bmc, UnregisteredBMC: tc.elsewhere}), tc.name)

		spec := s.Machines[tc.index]
		assert.Equal(t, tc.want, s.BMC(spec.Name), tc.name)
		assert.Equal(t, tc.ipmi, spec.IPMIBMC, tc.name)
	}

	assert.Equal(t, MachineBMC{}, (&State{}).BMC("unknown"), "an unknown machine has no owner")
}

func TestBMCConfig(t *testing.T) {
	t.Parallel()

	s := &State{Dir: "/lab", Prefix: "p", BMCPassword: "lab-0123456789ab", PowerBin: "/bin/lab-power"}
	spec, err := s.appendMachine(0, MachineConfig{Firmware: machine.BIOS, BMC: OwnerIPMI}, false)
	require.NoError(t, err)

	m := machine.New(spec)
	c := s.BMCConfig(m, "/bin/lab-power")

	require.NoError(t, c.Validate())
	assert.Equal(t, "/lab/machines/bios-0/bmc", c.Dir)
	assert.Equal(t, "10.77.0.1", c.LANAddr)
	assert.Equal(t, 62300, c.LANPort)
	assert.Equal(t, 62600, c.SerialPort)
	assert.Len(t, c.GUID, 32)
	assert.Equal(t, []string{"/bin/lab-power", "chassis", "--dir", "/lab", "--machine", "bios-0"}, c.ChassisCommand)
	assert.Equal(t, []ipmisim.User{
		{ID: 1, Privilege: "user"},
		{ID: 2, Enabled: true, Name: LabBMCUser, Password: "lab-0123456789ab", Privilege: "admin"},
	}, c.Users, "the anonymous slot disabled, the lab's admin, and free slots for the agent's user")

	client := s.BMCClient(m)
	assert.Equal(t, &ipmisim.Client{Addr: "10.77.0.1", Port: 62300, User: "admin", Password: "lab-0123456789ab"}, client)

	assert.IsType(t, &ipmisim.Client{}, s.Power(m), "an ipmi machine is powered through its BMC")

	other := machine.New(machine.Spec{Name: "bios-1", Index: 1})
	s.BMCs["bios-1"] = &MachineBMC{Owner: OwnerAPI}
	assert.Same(t, other, s.Power(other), "an api machine is powered directly")
}

func TestNewPassword(t *testing.T) {
	t.Parallel()

	a, err := newPassword()
	require.NoError(t, err)

	b, err := newPassword()
	require.NoError(t, err)

	assert.NotEqual(t, a, b)
	assert.Len(t, a, 16, "what the simulated BMC's config takes")
}

// recordingControl is a control API that records SetBMC requests.
type recordingControl struct {
	controlv1.UnimplementedTransitionServiceServer

	mu   sync.Mutex
	reqs []*controlv1.SetBMCRequest
}

func (r *recordingControl) SetBMC(_ context.Context, req *controlv1.SetBMCRequest) (*controlv1.SetBMCResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.reqs = append(r.reqs, req)

	return &controlv1.SetBMCResponse{MachineId: req.GetMachineId(), Kind: req.GetKind()}, nil
}

func TestRegisterBMCs(t *testing.T) {
	t.Parallel()

	// Short: a Unix socket path has at most 108 bytes.
	dir, err := os.MkdirTemp("", "lab")
	require.NoError(t, err)

	t.Cleanup(func() { os.RemoveAll(dir) })

	s := &State{Dir: dir, Prefix: "t", PowerBin: "/bin/lab-power"}
	require.NoError(t, os.MkdirAll(s.ProviderStateDir(), 0o755))

	l, err := net.Listen("unix", s.ControlSocket())
	require.NoError(t, err)

	srv := grpc.NewServer()
	rec := &recordingControl{}
	controlv1.RegisterTransitionServiceServer(srv, rec)

	go srv.Serve(l) //nolint:errcheck // ends with Stop

	t.Cleanup(srv.Stop)

	cfg := Config{Machines: 3, BMC: []PowerOwner{OwnerIPMI, OwnerAPI, OwnerNone}}
	require.NoError(t, s.addMachines(cfg))
	require.NoError(t, s.registerBMCs(t.Context()))

	ms := s.MachineList()

	require.Len(t, rec.reqs, 2, "the machine without an owner is not registered")
	assert.Equal(t, ms[0].UUID, rec.reqs[0].GetMachineId())
	assert.Equal(t, "ipmi", rec.reqs[0].GetKind())
	assert.Equal(t, "10.77.0.1", rec.reqs[0].GetAddress())
	assert.Equal(t, uint32(62300), rec.reqs[0].GetPort())
	assert.Empty(t, rec.reqs[0].GetUsername(), "the agent provisions the credentials")
	assert.Empty(t, rec.reqs[0].GetPassword())

	assert.Equal(t, ms[1].UUID, rec.reqs[1].GetMachineId())
	assert.Equal(t, "api", rec.reqs[1].GetKind())
	assert.Equal(t, "http://10.77.0.1:8090", rec.reqs[1].GetAddress())

	// Told once: again would replace the credentials the agent provisioned.
	require.NoError(t, s.registerBMCs(t.Context()))
	assert.Len(t, rec.reqs, 2)

	// Machines whose BMCs are given elsewhere are never told, even by a later lab up
	// that does not say so any more.
	require.NoError(t, s.addMachines(Config{Machines: 5, BMC: []PowerOwner{OwnerAPI}, UnregisteredBMC: []PowerOwner{OwnerAPI}}))
	require.NoError(t, s.addMachines(Config{Machines: 6, BMC: []PowerOwner{OwnerAPI}}))
	require.NoError(t, s.registerBMCs(t.Context()))
	require.Len(t, rec.reqs, 3, "only the sixth machine, whose BMC is the lab's to give")
	assert.Equal(t, s.MachineList()[5].UUID, rec.reqs[2].GetMachineId())

	saved, err := Load(dir)
	require.NoError(t, err)
	assert.True(t, saved.BMC(ms[0].Name).Registered, "recorded in the state file")

	// An owner that needs the power binary without one is refused.
	err = (&State{Dir: filepath.Join(dir, "x"), Prefix: "t"}).addMachines(Config{Machines: 1, BMC: []PowerOwner{OwnerAPI}})
	assert.ErrorContains(t, err, "lab-power")
}
