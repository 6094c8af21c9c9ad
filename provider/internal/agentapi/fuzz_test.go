package agentapi_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/anvil-metal/anvil/api/agent/v1"
	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
	"github.com/anvil-metal/anvil/internal/resourcewire"
	"github.com/anvil-metal/anvil/internal/token"
	"github.com/anvil-metal/anvil/provider/internal/agentapi"
	"github.com/anvil-metal/anvil/provider/internal/controllers"
	"github.com/anvil-metal/anvil/provider/internal/lifecycle"
	"github.com/anvil-metal/anvil/provider/internal/machineview"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// fuzzStream is an agent session's server stream fed from decoded messages: what the
// gRPC transport hands the server once it has unmarshaled an agent's bytes.
type fuzzStream struct {
	grpc.ServerStream

	ctx  context.Context //nolint:containedctx // a stream carries its context
	msgs []*agentv1.AgentMessage
	sent []*agentv1.ProviderMessage
}

func (s *fuzzStream) Context() context.Context { return s.ctx }

func (s *fuzzStream) Recv() (*agentv1.AgentMessage, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}

	m := s.msgs[0]
	s.msgs = s.msgs[1:]

	return m, nil
}

func (s *fuzzStream) Send(m *agentv1.ProviderMessage) error {
	s.sent = append(s.sent, m)

	return nil
}

// fuzzInventory is a full inventory as an agent reports it: SMBIOS system, CPUs and DIMMs,
// disks of each transport, physical NICs, loopback and an address.
func fuzzInventory(f *testing.F) [][]byte {
	f.Helper()

	sys := hardware.NewSystemInformation(hardware.SystemInformationID)
	sys.TypedSpec().Manufacturer, sys.TypedSpec().ProductName = "Supermicro", "SYS-1029U-TRT"
	sys.TypedSpec().SerialNumber, sys.TypedSpec().UUID = "S123456X", machineID

	res := []resource.Resource{sys}

	for i, socket := range []string{"CPU1", "CPU2"} {
		cpu := hardware.NewProcessorInfo(socket)
		cpu.TypedSpec().Socket, cpu.TypedSpec().ProductName = socket, "Intel(R) Xeon(R) Gold 6230"
		cpu.TypedSpec().CoreCount, cpu.TypedSpec().ThreadCount = uint32(20+i), 40
		res = append(res, cpu)
	}

	for _, slot := range []string{"P1-DIMMA1", "P1-DIMMB1", "P2-DIMMA1"} {
		dimm := hardware.NewMemoryModuleInfo(slot)
		dimm.TypedSpec().DeviceLocator, dimm.TypedSpec().Size = slot, 32768
		res = append(res, dimm)
	}

	for _, d := range []struct {
		id, model, transport string
		size                 uint64
		rotational           bool
	}{
		{"nvme0n1", "SAMSUNG MZQL2960HCJR", "nvme", 960 << 30, false},
		{"sda", "INTEL SSDSC2KB48", "sata", 480 << 30, false},
		{"sdb", "ST4000NM0035", "sata", 4 << 40, true},
		{"sr0", "QEMU DVD-ROM", "ata", 0, false},
	} {
		disk := block.NewDisk(block.NamespaceName, d.id)
		disk.TypedSpec().Model, disk.TypedSpec().Transport = d.model, d.transport
		disk.TypedSpec().Size, disk.TypedSpec().Rotational = d.size, d.rotational
		res = append(res, disk)
	}

	for i, name := range []string{"eno1", "eno2", "enp65s0f0"} {
		nic := network.NewLinkStatus(network.NamespaceName, name)
		nic.TypedSpec().Type = nethelpers.LinkEther
		nic.TypedSpec().HardwareAddr = nethelpers.HardwareAddr(net.HardwareAddr{0x3c, 0xec, 0xef, 0, 0, byte(i)})
		nic.TypedSpec().OperationalState = nethelpers.OperStateUp
		nic.TypedSpec().Driver, nic.TypedSpec().BusPath = "ixgbe", "pci-0000:41:00."+string(rune('0'+i))
		res = append(res, nic)
	}

	lo := network.NewLinkStatus(network.NamespaceName, "lo")
	lo.TypedSpec().Type = nethelpers.LinkLoopbck

	addr := network.NewAddressStatus(network.NamespaceName, "eno1/10.77.0.101/24")
	addr.TypedSpec().LinkName, addr.TypedSpec().Address = "eno1", netip.MustParsePrefix("10.77.0.101/24")
	addr.TypedSpec().Scope = nethelpers.ScopeGlobal

	raw, err := resourcewire.Encode(append(res, lo, addr))
	if err != nil {
		f.Fatal(err)
	}

	return raw
}

func marshalMsg(f *testing.F, m *agentv1.AgentMessage) []byte {
	f.Helper()

	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}

	return b
}

type countingRecorder struct{ calls int }

func (r *countingRecorder) RecordWiped(context.Context, string, resources.WipeRecord) error {
	r.calls++

	return nil
}

func (r *countingRecorder) RecordInventory(context.Context, string, resources.MachineInventorySpec) error {
	r.calls++

	return nil
}

func (r *countingRecorder) RecordBMC(context.Context, string, agentapi.BMCReport) error {
	r.calls++

	return nil
}

func (r *countingRecorder) RecordKexecOrdered(context.Context, string, string) error {
	r.calls++

	return nil
}

func (r *countingRecorder) RecordKexecLoaded(context.Context, string, string) error {
	r.calls++

	return nil
}

func (r *countingRecorder) RecordKexecFailed(context.Context, string, string, string) error {
	r.calls++

	return nil
}

// FuzzSession runs an agent session on messages decoded from any bytes: a hello, then
// two messages. With a forged or missing token nothing is recorded and nothing but the
// refusal goes back; with a valid one (sign) the messages are validated as sent, and no
// error names the token or a BMC password.
func FuzzSession(f *testing.F) {
	hello := func(results ...*agentv1.OrderResult) []byte {
		return marshalMsg(f, &agentv1.AgentMessage{Message: &agentv1.AgentMessage_Hello{Hello: &agentv1.Hello{
			MachineId: machineID, Token: "v1.forged.token", BootId: "6f1d2b0e-b2c4-4e8a-9a3b-1c2d3e4f5a6b", AgentVersion: "v0.15.0",
			Macs: []string{"3c:ec:ef:00:00:00", "3c:ec:ef:00:00:01"}, Results: results,
		}}})
	}
	msg := func(m *agentv1.AgentMessage) []byte { return marshalMsg(f, m) }
	result := func(r *agentv1.OrderResult) []byte {
		return msg(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Result{Result: r}})
	}

	inventory := msg(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{Resources: fuzzInventory(f)}}})
	wiped := &agentv1.OrderResult{OrderId: "wipe-g1", Status: agentv1.OrderResult_STATUS_DONE, Wipe: &agentv1.WipeReport{
		GenerationId: "g1", Disks: []*agentv1.DiskWipe{
			{Device: "/dev/nvme0n1", Method: "discard", Bytes: 960 << 30, DurationMs: 2100, Verified: "zeroes"},
			{Device: "/dev/sr0", Skipped: "read-only"},
		},
	}}
	bmc := &agentv1.OrderResult{OrderId: lifecycle.BMCOrderID, Status: agentv1.OrderResult_STATUS_DONE,
		Bmc: &agentv1.BMCInfo{Address: "10.78.0.101", Port: 623, User: "anvil", Password: "s3cret-bmc-pw"}}
	bmcFailed := &agentv1.OrderResult{OrderId: lifecycle.BMCOrderID, Status: agentv1.OrderResult_STATUS_FAILED, Message: "ipmitool: no BMC"}
	kexec := &agentv1.OrderResult{OrderId: "kexec-a1", Status: agentv1.OrderResult_STATUS_FAILED, Message: "kexec_file_load: EPERM"}

	// A corrupted resource inside an otherwise good inventory.
	bad := fuzzInventory(f)
	bad[0] = bad[0][:len(bad[0])/2]
	badInventory := msg(&agentv1.AgentMessage{Message: &agentv1.AgentMessage_Inventory{Inventory: &agentv1.Inventory{Resources: bad}}})

	fuzzcorpus.Seed(f,
		fuzzcorpus.E("inventory", hello(), inventory, []byte{}, true),
		fuzzcorpus.E("wipe-done", hello(), result(wiped), inventory, true),
		fuzzcorpus.E("hello-with-results", hello(wiped, bmc), []byte{}, []byte{}, true),
		fuzzcorpus.E("bmc-done", hello(), result(bmc), []byte{}, true),
		fuzzcorpus.E("bmc-failed", hello(), result(bmcFailed), []byte{}, true),
		fuzzcorpus.E("kexec-failed", hello(), result(kexec), []byte{}, true),
		fuzzcorpus.E("bad-inventory", hello(), badInventory, []byte{}, true),
		fuzzcorpus.E("second-hello", hello(), hello(), []byte{}, true),
		fuzzcorpus.E("forged-token", hello(), inventory, result(bmc), false),
		fuzzcorpus.E("result-first", result(wiped), inventory, []byte{}, true),
		fuzzcorpus.E("empty", []byte{}, []byte{}, []byte{}, false),
		fuzzcorpus.E("garbage", []byte{0xff, 0xff, 0xff, 0x0f}, []byte{0x0a}, []byte{}, true),
	)

	key := []byte("fuzz token key, 32 bytes long..")

	f.Fuzz(func(t *testing.T, first, second, third []byte, sign bool) {
		// The stream's context ends with the session, as gRPC's does, which stops the
		// session's receiving goroutine.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		stream := &fuzzStream{ctx: ctx}

		var secrets []string

		for _, b := range [][]byte{first, second, third} {
			m := &agentv1.AgentMessage{}
			if proto.Unmarshal(b, m) != nil {
				continue // the transport refuses what does not decode
			}

			if h := m.GetHello(); h != nil {
				if sign && len(stream.msgs) == 0 {
					h.Token = token.Sign(key, token.Claims{Kind: token.KindAgent, MachineID: h.GetMachineId(), Issued: time.Now()})
				}

				secrets = append(secrets, h.GetToken())
			}

			for _, r := range append(m.GetHello().GetResults(), m.GetResult()) {
				secrets = append(secrets, r.GetBmc().GetPassword())
			}

			stream.msgs = append(stream.msgs, m)
		}

		valid := false
		if len(stream.msgs) > 0 {
			h := stream.msgs[0].GetHello()
			c, err := token.Verify(key, h.GetToken())
			valid = h != nil && err == nil && c.Kind == token.KindAgent && c.MachineID == h.GetMachineId()
		}

		rec := &countingRecorder{}
		srv := agentapi.New(agentapi.Options{
			View: machineview.New(), TokenKey: key, Recorder: rec,
			Policy:       lifecycle.Policy{RejectedThen: lifecycle.RejectedReboot, Kexec: resources.KexecNever},
			Observations: make(chan controllers.PXEObservation, 1),
			Logger:       zap.NewNop(),
		})

		inventories := 0

		for _, m := range stream.msgs[min(1, len(stream.msgs)):] {
			if inv := m.GetInventory(); inv != nil {
				if _, err := resourcewire.Decode(inv.GetResources()); err == nil {
					inventories++
				}
			}
		}

		sent := len(stream.msgs)
		err := srv.Session(stream)

		if sent == 0 && err == io.EOF { //nolint:errorlint // the stream's own io.EOF, unwrapped
			return // the agent hung up before saying hello
		}

		if valid && err == nil && rec.calls < inventories {
			t.Fatalf("%d inventories, %d recorded", inventories, rec.calls)
		}

		if !valid {
			if err == nil {
				t.Fatalf("session without a valid hello ended well")
			}

			if rec.calls > 0 || len(stream.sent) > 0 {
				t.Fatalf("refused session recorded %d, sent %d", rec.calls, len(stream.sent))
			}
		}

		if err == nil {
			return
		}

		if c := status.Code(err); c == codes.Unknown || c == codes.Internal {
			t.Fatalf("session ended with %v", err)
		}

		for _, s := range secrets {
			if len(s) >= 6 && strings.Contains(err.Error(), s) {
				t.Fatalf("error %q names a secret", err)
			}
		}
	})
}
