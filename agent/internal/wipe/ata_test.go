package wipe

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSGIOHdrLayout(t *testing.T) {
	t.Parallel()

	// struct sg_io_hdr on x86-64: 88 bytes, usr_ptr at 56, status at 64, info at 80.
	assert.Equal(t, uintptr(88), unsafe.Sizeof(sgIOHdr{}))
	assert.Equal(t, uintptr(56), unsafe.Offsetof(sgIOHdr{}.UsrPtr))
	assert.Equal(t, uintptr(64), unsafe.Offsetof(sgIOHdr{}.Status))
	assert.Equal(t, uintptr(80), unsafe.Offsetof(sgIOHdr{}.Info))
}

func TestCDB16(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		tf   taskfile
		want [16]byte
	}{
		{"IDENTIFY DEVICE", taskfile{protocol: ataPIOIn, command: ataIdentifyDevice, count: 1},
			[16]byte{0x85, 0x08, 0x0e, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xec, 0}},
		{"SECURITY SET PASSWORD", taskfile{protocol: ataPIOOut, command: ataSecuritySetPassword, count: 1},
			[16]byte{0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xf1, 0}},
		{"SECURITY ERASE PREPARE", taskfile{protocol: ataNonData, command: ataSecurityErasePrep},
			[16]byte{0x85, 0x06, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf3, 0}},
		{"SECURITY ERASE UNIT", taskfile{protocol: ataPIOOut, command: ataSecurityEraseUnit, count: 1},
			[16]byte{0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xf4, 0}},
		{"registers placed", taskfile{protocol: ataNonData, command: 0x42, features: 0x0102, count: 0x0304, lba: 0x0a0b0c0d0e0f, device: 0x40},
			[16]byte{0x85, 0x06, 0x20, 0x01, 0x02, 0x03, 0x04, 0x0c, 0x0f, 0x0b, 0x0e, 0x0a, 0x0d, 0x40, 0x42, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, cdb16(tc.tf))
		})
	}
}

// identifyDevice builds IDENTIFY DEVICE data with a model and words 89, 90 and 128.
func identifyDevice(model string, w89, w90, w128 uint16) []byte {
	b := make([]byte, 512)

	m := []byte(model + "                                        ")[:40]
	for i := 0; i < 40; i += 2 {
		b[54+i], b[54+i+1] = m[i+1], m[i]
	}

	binary.LittleEndian.PutUint16(b[2*89:], w89)
	binary.LittleEndian.PutUint16(b[2*90:], w90)
	binary.LittleEndian.PutUint16(b[2*128:], w128)

	return b
}

func TestATAErasePlan(t *testing.T) {
	t.Parallel()

	const supported = ataSecSupported

	for _, tc := range []struct {
		name          string
		w89, w90, sec uint16
		wantEnhanced  bool
		wantTimeout   time.Duration
		wantErr       string
		unsupported   bool
	}{
		{name: "not supported", sec: 0, wantErr: `secure erase not supported by /dev/sda: "ACME SSD" does not support the ATA security feature set`, unsupported: true},
		{name: "frozen", sec: supported | ataSecFrozen, wantErr: "is security frozen", unsupported: true},
		{name: "locked", sec: supported | ataSecEnabled | ataSecLocked, wantErr: "is security locked"},
		{name: "password set", sec: supported | ataSecEnabled, wantErr: "has a user password set before"},
		{name: "attempts expired", sec: supported | ataSecCountExpired, wantErr: "attempt count expired"},
		// Word 89 = 60: 120 minutes; the timeout is 1.5x the estimate plus 30 minutes.
		{name: "normal erase, short format time", w89: 60, sec: supported, wantTimeout: 180*time.Minute + 30*time.Minute},
		// Word 90 with bit 15: 300 steps = 600 minutes.
		{name: "enhanced erase, extended format time", w89: 60, w90: 0x8000 | 300, sec: supported | ataSecEnhancedErase,
			wantEnhanced: true, wantTimeout: 900*time.Minute + 30*time.Minute},
		// Short format: only bits 7:0 count (255 = "over 508 minutes").
		{name: "short format ignores the high byte", w89: 0x0100 | 255, sec: supported, wantTimeout: 765*time.Minute + 30*time.Minute},
		{name: "time not reported", sec: supported | ataSecEnhancedErase, w89: 10, wantEnhanced: true, wantTimeout: 12 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			s, err := parseIdentifyDevice(identifyDevice("ACME SSD", tc.w89, tc.w90, tc.sec))
			require.NoError(t, err)
			assert.Equal(t, "ACME SSD", s.model)

			enhanced, timeout, err := ataErasePlan("/dev/sda", s)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.Equal(t, tc.unsupported, errors.Is(err, ErrSecureEraseUnsupported))

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.wantEnhanced, enhanced)
			assert.Equal(t, tc.wantTimeout, timeout)
		})
	}

	_, err := parseIdentifyDevice(make([]byte, 100))
	assert.ErrorContains(t, err, "IDENTIFY DEVICE data is 100 bytes")
}

// fakeATA is a drive's security state machine, as far as the erase goes.
type fakeATA struct {
	status   uint16
	password string
	failOn   uint8
	sent     []taskfile
	payloads map[uint8][]byte
	timeouts map[uint8]time.Duration
}

func (f *fakeATA) do(tf taskfile, data []byte, timeout time.Duration) error {
	f.sent = append(f.sent, tf)
	f.timeouts[tf.command] = timeout

	if tf.protocol == ataPIOOut {
		f.payloads[tf.command] = append([]byte(nil), data...)
	}

	if tf.command == f.failOn {
		return errors.New("aborted")
	}

	switch tf.command {
	case ataIdentifyDevice:
		copy(data, identifyDevice("ACME SSD", 10, 20, f.status))
	case ataSecuritySetPassword:
		f.status |= ataSecEnabled
		f.password = string(data[2:12])
	case ataSecurityEraseUnit:
		if f.password == string(data[2:12]) {
			f.status &^= ataSecEnabled
		}
	}

	return nil
}

func TestEraseATA(t *testing.T) {
	t.Parallel()

	commands := func(tfs []taskfile) []uint8 {
		var cs []uint8
		for _, tf := range tfs {
			cs = append(cs, tf.command)
		}

		return cs
	}

	t.Run("enhanced", func(t *testing.T) {
		t.Parallel()

		dev := &fakeATA{status: ataSecSupported | ataSecEnhancedErase, payloads: map[uint8][]byte{}, timeouts: map[uint8]time.Duration{}}
		res, err := eraseATA(t.Context(), dev, "/dev/sda")
		require.NoError(t, err)
		assert.Equal(t, "ATA enhanced security erase", res.method)
		assert.False(t, res.zeroes, "an enhanced erase writes the vendor's pattern")
		assert.Equal(t, []uint8{ataIdentifyDevice, ataSecuritySetPassword, ataSecurityErasePrep, ataSecurityEraseUnit, ataIdentifyDevice}, commands(dev.sent))
		assert.Equal(t, securityPayload(0, erasePassword), dev.payloads[ataSecuritySetPassword])
		assert.Equal(t, securityPayload(1<<1, erasePassword), dev.payloads[ataSecurityEraseUnit])
		assert.Equal(t, 40*time.Minute*3/2+30*time.Minute, dev.timeouts[ataSecurityEraseUnit], "word 90: 20 steps of 2 minutes")
	})

	t.Run("normal", func(t *testing.T) {
		t.Parallel()

		dev := &fakeATA{status: ataSecSupported, payloads: map[uint8][]byte{}, timeouts: map[uint8]time.Duration{}}
		res, err := eraseATA(t.Context(), dev, "/dev/sda")
		require.NoError(t, err)
		assert.Equal(t, "ATA security erase", res.method)
		assert.True(t, res.zeroes)
		assert.Equal(t, securityPayload(0, erasePassword), dev.payloads[ataSecurityEraseUnit])
	})

	t.Run("frozen: no password set", func(t *testing.T) {
		t.Parallel()

		dev := &fakeATA{status: ataSecSupported | ataSecFrozen, payloads: map[uint8][]byte{}, timeouts: map[uint8]time.Duration{}}
		_, err := eraseATA(t.Context(), dev, "/dev/sda")
		require.ErrorIs(t, err, ErrSecureEraseUnsupported)
		assert.Equal(t, []uint8{ataIdentifyDevice}, commands(dev.sent))
	})

	t.Run("erase fails: the password is named", func(t *testing.T) {
		t.Parallel()

		dev := &fakeATA{status: ataSecSupported, failOn: ataSecurityEraseUnit, payloads: map[uint8][]byte{}, timeouts: map[uint8]time.Duration{}}
		_, err := eraseATA(t.Context(), dev, "/dev/sda")
		require.ErrorContains(t, err, `error erasing /dev/sda (it may keep the user password "anvil-wipe"): aborted`)
		assert.NotErrorIs(t, err, ErrSecureEraseUnsupported)
	})
}

func TestSGResultError(t *testing.T) {
	t.Parallel()

	tf := taskfile{command: ataSecurityErasePrep}

	// Descriptor sense with an ATA Status Return descriptor: error 0x04 (abort), status 0x51.
	ataSense := func(key, asc, ascq, status uint8) []byte {
		s := make([]byte, 8+14)
		s[0], s[1], s[2], s[3], s[7] = 0x72, key, asc, ascq, 14
		s[8], s[9], s[11], s[21] = 0x09, 0x0c, 0x04, status

		return s
	}

	for _, tc := range []struct {
		name         string
		status       uint8
		host, driver uint16
		sense        []byte
		wantErr      string
	}{
		{name: "good"},
		{name: "good with registers (CK_COND)", status: 2, driver: 0x08, sense: ataSense(0x01, 0x00, 0x1d, 0x50)},
		{name: "aborted in the registers", status: 2, driver: 0x08, sense: ataSense(0x01, 0x00, 0x1d, 0x51), wantErr: "ATA command 0xf3 aborted: status 0x51 error 0x4"},
		{name: "aborted command", status: 2, driver: 0x08, sense: ataSense(0x0b, 0x00, 0x00, 0x51), wantErr: "sense key 0xb, ATA status 0x51 error 0x4"},
		{name: "fixed sense", status: 2, driver: 0x08, sense: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00}, wantErr: "sense key 0x5 asc 0x20 ascq 0x0"},
		{name: "host error", host: 0x07, wantErr: "host status 0x7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			err := sgResultError(tc.status, tc.host, tc.driver, tc.sense, tf)
			if tc.wantErr == "" {
				assert.NoError(t, err)

				return
			}

			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
}
