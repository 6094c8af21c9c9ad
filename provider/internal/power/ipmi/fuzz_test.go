package ipmi

import (
	"context"
	"strings"
	"testing"

	goipmi "github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/app"
	"github.com/bougou/go-ipmi/pkg/command/chassis"
	"github.com/bougou/go-ipmi/pkg/rmcpplus"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/anvil-metal/anvil/internal/fuzzcorpus"
)

// reply is one reply Anvil reads from a BMC: the request it answers and the response
// go-ipmi unpacks it into.
type reply struct {
	name string
	cmd  types.Command
	resp func() types.Response
}

// replies are the replies of every exchange Dial and the client make: the session setup
// (channel capabilities, Open Session, RAKP 2 and 4, privilege), chassis status and
// control, boot options, close.
var replies = []reply{
	{"channel-auth", types.CommandGetChannelAuthCapabilities, func() types.Response { return &app.GetChannelAuthenticationCapabilitiesResponse{} }},
	{"open-session", types.Command{}, func() types.Response { return &rmcpplus.OpenSessionResponse{} }},
	{"rakp2", types.Command{}, func() types.Response { return &rmcpplus.RAKPMessage2{} }},
	{"rakp4", types.Command{}, func() types.Response { return &rmcpplus.RAKPMessage4{} }},
	{"privilege", types.CommandSetSessionPrivilegeLevel, func() types.Response { return &app.SetSessionPrivilegeLevelResponse{} }},
	{"chassis-status", types.CommandGetChassisStatus, func() types.Response { return &chassis.GetChassisStatusResponse{} }},
	{"chassis-control", types.CommandChassisControl, func() types.Response { return &chassis.ChassisControlResponse{} }},
	{"get-boot-options", types.CommandGetSystemBootOptions, func() types.Response { return &chassis.GetSystemBootOptionsParamResponse{} }},
	{"set-boot-options", types.CommandSetSystemBootOptions, func() types.Response { return &chassis.SetSystemBootOptionsParamResponse{} }},
	{"close-session", types.CommandCloseSession, func() types.Response { return &app.CloseSessionResponse{} }},
}

func replyIndex(name string) byte {
	for i, r := range replies {
		if r.name == name {
			return byte(i)
		}
	}

	panic("no reply " + name)
}

// ipmiMessage is an IPMI response message: addresses, netFn, sequence, command,
// completion code, data, with both checksums.
func ipmiMessage(netFn types.NetFn, cmd, ccode uint8, data []byte) []byte {
	msg := []byte{0x81, uint8(netFn) << 2, 0, 0x20, 0, cmd, ccode}
	msg[2] = -(msg[0] + msg[1])
	msg = append(msg, data...)

	var sum uint8
	for _, b := range msg[3:] {
		sum += b
	}

	return append(msg, -sum)
}

// rmcpPacket wraps a payload as a BMC sends it before the session keys exist: RMCP
// header, an IPMI 2.0 session header in the clear.
func rmcpPacket(payloadType types.PayloadType, payload []byte) []byte {
	rmcp := &types.Rmcp{
		RmcpHeader: types.NewRmcpHeader(),
		Session20: &types.Session20{
			SessionHeader20: &types.SessionHeader20{
				AuthType: types.AuthTypeRMCPPlus, PayloadType: payloadType, SessionID: 0x0200a0a2, Sequence: 1,
				PayloadLength: uint16(len(payload)),
			},
			SessionPayload: payload,
		},
	}

	return rmcp.Pack()
}

// FuzzIPMIReply feeds any datagram as a BMC's reply to each exchange Anvil makes, through
// go-ipmi's packet parsing (RMCP, session header, IPMI message, completion code) and the
// command's response unpacking, and Anvil's error wrapping: a hostile or broken BMC gets
// an error, never a crash of the provider, and no error carries the password.
func FuzzIPMIReply(f *testing.F) {
	status := (&chassis.GetChassisStatusResponse{PowerIsOn: true, PowerRestorePolicy: chassis.PowerRestorePolicyAlwaysOff}).Pack()
	caps := []byte{0x01, 0x80, 0x14, 0x02, 0x00, 0x00, 0x00, 0x00}                         // channel 1, IPMI 2.0, MD5+password
	open := []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa2, 0xa0, 0x00, 0x02} // tag, status, priv, reserved, console, BMC session IDs
	open = append(open, 0x00, 0, 0, 8, 1, 0, 0, 0, 0x01, 0, 0, 8, 1, 0, 0, 0, 0x02, 0, 0, 8, 1, 0, 0, 0)
	rakp2 := append([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, make([]byte, 16+16+20)...)
	rakp4 := append([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, make([]byte, 12)...)
	flags := []byte{0x01, 0x05, 0xa0, 0x04, 0x00, 0x00, 0x00} // version, boot flags param, valid+EFI, PXE

	fuzzcorpus.Seed(f,
		fuzzcorpus.E("channel-auth", replyIndex("channel-auth"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnAppResponse, 0x38, 0, caps))),
		fuzzcorpus.E("open-session", replyIndex("open-session"), rmcpPacket(types.PayloadTypeRmcpOpenSessionResponse, open)),
		fuzzcorpus.E("open-session-refused", replyIndex("open-session"), rmcpPacket(types.PayloadTypeRmcpOpenSessionResponse, []byte{0, 0x12, 0, 0, 0, 0, 0, 0})),
		fuzzcorpus.E("rakp2", replyIndex("rakp2"), rmcpPacket(types.PayloadTypeRAKPMessage2, rakp2)),
		fuzzcorpus.E("rakp2-bad-password", replyIndex("rakp2"), rmcpPacket(types.PayloadTypeRAKPMessage2, []byte{0, 0x0d, 0, 0, 0, 0, 0, 0})),
		fuzzcorpus.E("rakp4", replyIndex("rakp4"), rmcpPacket(types.PayloadTypeRAKPMessage4, rakp4)),
		fuzzcorpus.E("privilege", replyIndex("privilege"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnAppResponse, 0x3b, 0, []byte{0x03}))),
		fuzzcorpus.E("chassis-status-on", replyIndex("chassis-status"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnChassisResponse, 0x01, 0, status))),
		fuzzcorpus.E("chassis-status-short", replyIndex("chassis-status"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnChassisResponse, 0x01, 0, []byte{0x01}))),
		fuzzcorpus.E("chassis-control", replyIndex("chassis-control"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnChassisResponse, 0x02, 0, nil))),
		fuzzcorpus.E("chassis-control-priv", replyIndex("chassis-control"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnChassisResponse, 0x02, 0xd4, nil))),
		fuzzcorpus.E("get-boot-flags", replyIndex("get-boot-options"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnChassisResponse, 0x09, 0, flags))),
		fuzzcorpus.E("set-boot-options", replyIndex("set-boot-options"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnChassisResponse, 0x08, 0, nil))),
		fuzzcorpus.E("close-session", replyIndex("close-session"), rmcpPacket(types.PayloadTypeIPMI, ipmiMessage(types.NetFnAppResponse, 0x3c, 0, nil))),
		fuzzcorpus.E("encrypted", replyIndex("chassis-status"), append([]byte{0x06, 0x00, 0xff, 0x07, 0x06, 0xc0, 1, 2, 3, 4, 1, 0, 0, 0, 0x20, 0}, make([]byte, 32)...)),
		fuzzcorpus.E("asf-pong", replyIndex("chassis-status"), []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x40, 0x00, 0x00, 0x10}),
		fuzzcorpus.E("ipmi15", replyIndex("channel-auth"), append([]byte{0x06, 0x00, 0xff, 0x07, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}, ipmiMessage(types.NetFnAppResponse, 0x38, 0, caps)...)),
		fuzzcorpus.E("empty", byte(0), []byte{}),
	)

	const password = "s3cret-bmc-password"

	lib, err := goipmi.NewClient("127.0.0.1", DefaultPort, "admin", password)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, which byte, pkt []byte) {
		r := replies[int(which)%len(replies)]
		resp := r.resp()

		err := lib.ParseRmcpResponse(context.Background(), pkt, r.cmd, resp)

		// What Anvil does with what comes back: the boot flags are unpacked again from
		// the parameter data, and every error is wrapped.
		if err == nil {
			if bo, ok := resp.(*chassis.GetSystemBootOptionsParamResponse); ok {
				err = (&types.BootOptionParam_BootFlags{}).Unpack(bo.ParamData)
			}
		}

		if err = wrapError("reading the reply", err); err != nil && strings.Contains(err.Error(), password) {
			t.Fatalf("error names the password: %v", err)
		}
	})
}
