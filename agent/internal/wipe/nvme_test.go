package wipe

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/nvme"
)

func TestFormatCDW10(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		ns   nvme.Namespace
		ses  uint8
		want uint32
	}{
		{"format 0, user data erase", nvme.Namespace{}, nvmeSESUserData, 1 << 9},
		{"format 0, crypto erase", nvme.Namespace{}, nvmeSESCrypto, 2 << 9},
		{"format 3 kept", nvme.Namespace{FLBAS: 3}, nvmeSESUserData, 3 | 1<<9},
		{"extended metadata kept", nvme.Namespace{FLBAS: 1 | 1<<4}, nvmeSESUserData, 1 | 1<<4 | 1<<9},
		{"protection type 2, first bytes", nvme.Namespace{DPS: 2 | 1<<3}, nvmeSESCrypto, 2<<5 | 1<<8 | 2<<9},
		{"format 17: upper bits", nvme.Namespace{FLBAS: 1 | 1<<5}, nvmeSESUserData, 1 | 1<<9 | 1<<12},
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
	sent       []nvme.Command
	identifies int
}

func (f *fakeNVMe) NamespaceID() (uint32, error) { return f.nsid, nil }

func (f *fakeNVMe) Admin(cmd *nvme.Command, data []byte) error {
	f.sent = append(f.sent, *cmd)

	switch cmd.Opcode {
	case nvme.OpIdentify:
		f.identifies++

		if cmd.CDW10 == nvme.CNSController {
			copy(data, f.ctrl)
		} else {
			copy(data, f.ns)
		}

		return nil
	case nvme.OpFormatNVM:
		return f.formatErr
	}

	return errors.New("unexpected command")
}

func identifyPages(oacs uint16, fna, flbas, dlfeat uint8) (ctrl, ns []byte) {
	ctrl, ns = make([]byte, nvme.IdentifySize), make([]byte, nvme.IdentifySize)
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
		{name: "erase refused", oacs: nvmeOACSFormat, formatErr: &nvme.StatusError{Op: "Format NVM", Status: 0x4002},
			wantErr: "refused the erase", unsupported: true},
		{name: "format failed", oacs: nvmeOACSFormat, formatErr: &nvme.StatusError{Op: "Format NVM", Status: 0x0106},
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
			assert.Equal(t, uint8(nvme.OpFormatNVM), format.Opcode)
			assert.Equal(t, uint32(1), format.NSID)
			assert.Equal(t, tc.wantCDW10, format.CDW10)
			assert.Equal(t, uint32(4*3600*1000), format.TimeoutMs)
			assert.Equal(t, 2, dev.identifies)
		})
	}
}
