package talosrecord

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/meta"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The calls' names, which recordings and replays share.
const (
	CallVersion            = "version"
	CallMachineStatus      = "machine status"
	CallSchematicExtension = "schematic extension"
	CallApplyEmpty         = "apply: empty"
	CallApplyNotYAML       = "apply: not YAML"
	CallApplyNoInstallDisk = "apply: machine config without an install disk, AUTO"
	CallApplySinkAuto      = "apply: event sink alone, AUTO"
	CallApplySinkNoReboot  = "apply: event sink alone, NO_REBOOT"
	CallApplySinkReboot    = "apply: event sink alone, REBOOT"
	CallApplySinkStaged    = "apply: event sink alone, STAGED"
	CallApplyMachine       = "apply: machine config, AUTO"
	CallApplyMachineNoRbt  = "apply: machine config, NO_REBOOT"
	CallApplyMachineStaged = "apply: machine config, STAGED"
	CallMetaWriteUser      = "meta write: a user key"
	CallMetaDeleteUser     = "meta delete: the user key"
	CallMetaDeleteUserGone = "meta delete: the user key, deleted"
	CallMetaDeleteStateEnc = "meta delete: state encryption config (unset)"
	CallReadBootID         = "read: boot ID"
	CallReset              = "reset: Omni's"
)

// userKey is the META key the probes write and delete: one reserved for users.
const userKey = meta.UserReserved1

// Maintenance asks Talos in maintenance mode (a client with no certificate, as
// talosctl --insecure) what Omni and talosctl ask it, and what it says to bad configs.
// Nothing here changes the machine: the configs applied are valid event sink documents
// only, and the calls that need an administrator are refused to this client.
func Maintenance(ctx context.Context, c *client.Client, cfgs *Configs, schematic, manifest string) []Call {
	return []Call{
		Version(ctx, c),
		MachineStatus(ctx, c),
		SchematicExtension(ctx, c, schematic, manifest),
		Apply(ctx, c, CallApplyEmpty, nil, machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplyNotYAML, []byte("{{{"), machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplyNoInstallDisk, cfgs.NoInstallDisk, machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplySinkAuto, cfgs.EventSink, machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplySinkNoReboot, cfgs.EventSink, machine.ApplyConfigurationRequest_NO_REBOOT),
		Apply(ctx, c, CallApplySinkReboot, cfgs.EventSink, machine.ApplyConfigurationRequest_REBOOT), //nolint:staticcheck // deprecated, still answered
		Apply(ctx, c, CallApplySinkStaged, cfgs.EventSink, machine.ApplyConfigurationRequest_STAGED),
		MetaWrite(ctx, c, CallMetaWriteUser),
		MetaDelete(ctx, c, CallMetaDeleteStateEnc, meta.StateEncryptionConfig),
		ReadBootID(ctx, c),
		Reset(ctx, c),
	}
}

// Install applies the machine config in maintenance, as Omni does (mode AUTO): Talos
// installs itself.
func Install(ctx context.Context, c *client.Client, cfgs *Configs) Call {
	return Apply(ctx, c, CallApplyMachine, cfgs.Machine, machine.ApplyConfigurationRequest_AUTO)
}

// Installed asks the installed Talos, with the cluster's admin certificate, what Omni
// asks a running machine, short of the reset: the configs applied are the one it runs
// (AUTO, as Omni applies, and NO_REBOOT and STAGED), which change nothing.
func Installed(ctx context.Context, c *client.Client, cfgs *Configs, schematic, manifest string) []Call {
	return []Call{
		Version(ctx, c),
		MachineStatus(ctx, c),
		SchematicExtension(ctx, c, schematic, manifest),
		Apply(ctx, c, CallApplyEmpty, nil, machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplyNotYAML, []byte("{{{"), machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplySinkAuto, cfgs.EventSink, machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplyMachine, cfgs.Machine, machine.ApplyConfigurationRequest_AUTO),
		Apply(ctx, c, CallApplyMachineNoRbt, cfgs.Machine, machine.ApplyConfigurationRequest_NO_REBOOT),
		Apply(ctx, c, CallApplyMachineStaged, cfgs.Machine, machine.ApplyConfigurationRequest_STAGED),
		MetaDelete(ctx, c, CallMetaDeleteStateEnc, meta.StateEncryptionConfig),
		MetaWrite(ctx, c, CallMetaWriteUser),
		MetaDelete(ctx, c, CallMetaDeleteUser, userKey),
		MetaDelete(ctx, c, CallMetaDeleteUserGone, userKey),
		ReadBootID(ctx, c),
	}
}

// OmniReset is the reset Omni asks of a cluster's machine it lets go
// (machineconfig/status.go): reboot, wipe STATE and EPHEMERAL. Not graceful: a graceful
// reset leaves etcd and drains the node first, and the lab runs neither etcd nor
// Kubernetes.
func OmniReset() *machine.ResetRequest {
	return &machine.ResetRequest{
		Graceful: false,
		Reboot:   true,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{
			{Label: constants.EphemeralPartitionLabel, Wipe: true},
			{Label: constants.StatePartitionLabel, Wipe: true},
		},
	}
}

// Version calls MachineService/Version.
func Version(ctx context.Context, c *client.Client) Call {
	resp, err := c.MachineClient.Version(ctx, &emptypb.Empty{})

	return answer(CallVersion, "/machine.MachineService/Version", resp, err)
}

// MachineStatus reads the runtime MachineStatus over COSI: the stage and readiness.
func MachineStatus(ctx context.Context, c *client.Client) Call {
	const method = "/cosi.resource.State/Get " + runtimeres.MachineStatusType

	ms, err := safe.StateGetByID[*runtimeres.MachineStatus](ctx, c.COSI, runtimeres.MachineStatusID)
	if err != nil {
		return failed(CallMachineStatus, method, err)
	}

	spec := ms.TypedSpec()

	unmet := []any{}
	for _, u := range spec.Status.UnmetConditions {
		unmet = append(unmet, map[string]any{"name": u.Name, "reason": u.Reason})
	}

	return Call{Name: CallMachineStatus, Method: method, Code: "OK", Response: map[string]any{
		"stage": spec.Stage.String(), "ready": spec.Status.Ready, "unmetConditions": unmet,
	}}
}

// SchematicExtension lists the extension statuses over COSI and keeps the schematic's
// (the image factory's meta extension): its ID and document stand as placeholders when
// they are the schematic's and manifest.
func SchematicExtension(ctx context.Context, c *client.Client, schematic, manifest string) Call {
	const method = "/cosi.resource.State/List " + runtimeres.ExtensionStatusType

	list, err := safe.StateListAll[*runtimeres.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		return failed(CallSchematicExtension, method, err)
	}

	found := []any{}

	list.ForEach(func(ext *runtimeres.ExtensionStatus) {
		spec := ext.TypedSpec()
		if spec.Metadata.Name != constants.ImageFactorySchematicExtensionName {
			return
		}

		version, extra := spec.Metadata.Version, spec.Metadata.ExtraInfo
		if version == schematic {
			version = Schematic
		}

		if strings.TrimSpace(extra) == strings.TrimSpace(manifest) {
			extra = Manifest
		}

		found = append(found, map[string]any{
			"name": spec.Metadata.Name, "version": version, "author": spec.Metadata.Author,
			"description": spec.Metadata.Description, "extraInfo": extra,
			// The layer's file: the factory's own, or none.
			"image": spec.Image != "",
		})
	})

	return Call{Name: CallSchematicExtension, Method: method, Code: "OK", Response: found}
}

// Apply calls MachineService/ApplyConfiguration.
func Apply(ctx context.Context, c *client.Client, name string, data []byte, mode machine.ApplyConfigurationRequest_Mode) Call {
	resp, err := c.MachineClient.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: data, Mode: mode})

	return answer(name, "/machine.MachineService/ApplyConfiguration", resp, err)
}

// MetaWrite writes the user key.
func MetaWrite(ctx context.Context, c *client.Client, name string) Call {
	resp, err := c.MachineClient.MetaWrite(ctx, &machine.MetaWriteRequest{Key: userKey, Value: []byte("talos-record")})

	return answer(name, "/machine.MachineService/MetaWrite", resp, err)
}

// MetaDelete deletes a META key.
func MetaDelete(ctx context.Context, c *client.Client, name string, key uint8) Call {
	resp, err := c.MachineClient.MetaDelete(ctx, &machine.MetaDeleteRequest{Key: uint32(key)})

	return answer(name, "/machine.MachineService/MetaDelete", resp, err)
}

// ReadBootID reads the boot ID as Omni does (MachineService/Read): the chunks' number
// and sizes, and whether it ends with a newline, not the ID.
func ReadBootID(ctx context.Context, c *client.Client) Call {
	const method = "/machine.MachineService/Read"

	stream, err := c.MachineClient.Read(ctx, &machine.ReadRequest{Path: "/proc/sys/kernel/random/boot_id"})
	if err != nil {
		return failed(CallReadBootID, method, err)
	}

	var (
		sizes []any
		all   []byte
	)

	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return failed(CallReadBootID, method, err)
		}

		sizes = append(sizes, len(chunk.GetBytes()))
		all = append(all, chunk.GetBytes()...)
	}

	return Call{Name: CallReadBootID, Method: method, Code: "OK", Response: map[string]any{
		"chunks": sizes, "bytes": len(all), "newline": strings.HasSuffix(string(all), "\n"),
	}}
}

// Reset asks for Omni's reset.
func Reset(ctx context.Context, c *client.Client) Call {
	call, _ := ResetActor(ctx, c)

	return call
}

// ResetActor asks for Omni's reset and returns the actor ID it was answered with too.
func ResetActor(ctx context.Context, c *client.Client) (Call, string) {
	resp, err := c.MachineClient.Reset(ctx, OmniReset())

	var actor string
	if len(resp.GetMessages()) > 0 {
		actor = resp.GetMessages()[0].GetActorId()
	}

	return answer(CallReset, "/machine.MachineService/Reset", resp, err), actor
}

func answer(name, method string, resp proto.Message, err error) Call {
	if err != nil {
		return failed(name, method, err)
	}

	return Call{Name: name, Method: method, Code: "OK", Response: Normalize(resp)}
}

func failed(name, method string, err error) Call {
	st, ok := status.FromError(err)
	if !ok {
		return Call{Name: name, Method: method, Code: "Unknown", Message: fmt.Sprintf("not a gRPC status: %v", err)}
	}

	return Call{Name: name, Method: method, Code: st.Code().String(), Message: st.Message()}
}
