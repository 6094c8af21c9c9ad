package wipe

import (
	"encoding/binary"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNVMeCommandLayout(t *testing.T) {
	t.Parallel()

	// struct nvme_passthru_cmd is 72 bytes; the ioctl number encodes that size.
	assert.Equal(t, uintptr(72), unsafe.Sizeof(nvmeCommand{}))
	assert.Equal(t, uintptr(72), uintptr(nvmeIoctlAdminCmd>>16&0x3fff))
	assert.Equal(t, uintptr(60), unsafe.Offsetof(nvmeCommand{}.CDW15))
}

func TestFormatCDW10(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		ns   nvmeNamespace
		ses  uint8
		want uint32
	}{
		{"format 0, user data erase", nvmeNamespace{}, nvmeSESUserData, 1 << 9},
		{"format 0, crypto erase", nvmeNamespace{}, nvmeSESCrypto, 2 << 9},
		{"format 3 kept", nvmeNamespace{flbas: 3}, nvmeSESUserData, 3 | 1<<9},
		{"extended metadata kept", nvmeNamespace{flbas: 1 | 1<<4}, nvmeSESUserData, 1 | 1<<4 | 1<<9},
		{"protection type 2, first bytes", nvmeNamespace{dps: 2 | 1<<3}, nvmeSESCrypto, 2<<5 | 1<<8 | 2<<9},
		{"format 17: upper bits", nvmeNamespace{flbas: 1 | 1<<5}, nvmeSESUserData, 1 | 1<<9 | 1<<12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, formatCDW10(tc.ns, tc.ses))
		})
	}
}

// fakeNVMe answers Identify from fixed pages and records what else it is sent.
type fakeNVMe struct {
	nsid       uint32
	ctrl, ns   []byte
	formatErr  error
	sent       []nvmeCommand
	identifies int
}

func (f *fakeNVMe) namespaceID() (uint32, error) { return f.nsid, nil }

func (f *fakeNVMe) admin(cmd *nvmeCommand, data []byte) error {
	f.sent = append(f.sent, *cmd)

	switch cmd.Opcode {
	case nvmeOpIdentify:
		f.identifies++

		if cmd.CDW10 == nvmeCNSController {
			copy(data, f.ctrl)
		} else {
			copy(data, f.ns)
		}

		return nil
	case nvmeOpFormatNVM:
		return f.formatErr
	}

	return errors.New("unexpected command")
}

func identifyPages(oacs uint16, fna, flbas, dlfeat uint8) (ctrl, ns []byte) {
	ctrl, ns = make([]byte, nvmeIdentifySize), make([]byte, nvmeIdentifySize)
	copy(ctrl[24:64], "QEMU NVMe Ctrl                          ")
	binary.LittleEndian.PutUint16(ctrl[256:], oacs)
	ctrl[524] = fna
	ns[26], ns[33] = flbas, dlfeat

	return ctrl, ns
}

func TestEraseNVMe(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name        string
		oacs        uint16
		fna, flbas  uint8
		formatErr   error
		wantMethod  string
		wantCDW10   uint32
		wantErr     string
		unsupported bool
	}{
		{name: "user data erase", oacs: nvmeOACSFormat, wantMethod: "NVMe Format NVM, user data erase", wantCDW10: 1 << 9},
		{name: "crypto erase where supported", oacs: nvmeOACSFormat | 1<<3, fna: nvmeFNACryptoSupports, flbas: 4,
			wantMethod: "NVMe Format NVM, cryptographic erase", wantCDW10: 4 | 2<<9},
		{name: "no Format NVM", oacs: 1 << 3, wantErr: `secure erase not supported by /dev/nvme0n1: controller "QEMU NVMe Ctrl" does not support Format NVM`, unsupported: true},
		{name: "erase refused", oacs: nvmeOACSFormat, formatErr: &nvmeStatusError{op: "Format NVM", status: 0x4002},
			wantErr: "refused the erase", unsupported: true},
		{name: "format failed", oacs: nvmeOACSFormat, formatErr: &nvmeStatusError{op: "Format NVM", status: 0x0106},
			wantErr: "error formatting /dev/nvme0n1: NVMe Format NVM failed with status type 0x1 code 0x6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			dev := &fakeNVMe{nsid: 1, formatErr: tc.formatErr}
			dev.ctrl, dev.ns = identifyPages(tc.oacs, tc.fna, tc.flbas, nvmeDLFEATReadZeroes)

			res, err := eraseNVMe(t.Context(), dev, "/dev/nvme0n1")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.Equal(t, tc.unsupported, errors.Is(err, ErrSecureEraseUnsupported))

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.wantMethod, res.method)
			assert.False(t, res.zeroes, "a Format NVM erase does not promise zeroes")
			assert.Contains(t, res.note, "deallocated blocks read as zeroes")

			format := dev.sent[len(dev.sent)-1]
			assert.Equal(t, uint8(nvmeOpFormatNVM), format.Opcode)
			assert.Equal(t, uint32(1), format.NSID)
			assert.Equal(t, tc.wantCDW10, format.CDW10)
			assert.Equal(t, uint32(4*3600*1000), format.TimeoutMs)
			assert.Equal(t, 2, dev.identifies)
		})
	}
}

func TestNVMeStatusError(t *testing.T) {
	t.Parallel()

	assert.Equal(t, "NVMe Format NVM failed with status type 0x0 code 0x2: invalid field in command",
		(&nvmeStatusError{op: "Format NVM", status: 0x4002}).Error())
	assert.Equal(t, "NVMe Format NVM failed with status type 0x1 code 0xa: invalid format",
		(&nvmeStatusError{op: "Format NVM", status: 0x010a}).Error())
}
