package nvme

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommandLayout(t *testing.T) {
	t.Parallel()

	// struct nvme_passthru_cmd is 72 bytes; the ioctl number encodes that size.
	assert.Equal(t, uintptr(72), unsafe.Sizeof(Command{}))
	assert.Equal(t, uintptr(72), uintptr(ioctlAdminCmd>>16&0x3fff))
	assert.Equal(t, uintptr(60), unsafe.Offsetof(Command{}.CDW15))
}

func TestStatusError(t *testing.T) {
	t.Parallel()

	assert.Equal(t, "NVMe Format NVM failed with status type 0x0 code 0x2: invalid field in command",
		(&StatusError{Op: "Format NVM", Status: 0x4002}).Error())
	assert.Equal(t, "NVMe Format NVM failed with status type 0x1 code 0xa: invalid format",
		(&StatusError{Op: "Format NVM", Status: 0x010a}).Error())
}

// logDevice answers Get Log Page with a page filled with its log identifier.
type logDevice struct{ sent []Command }

func (d *logDevice) NamespaceID() (uint32, error) { return 1, nil }

func (d *logDevice) Admin(cmd *Command, data []byte) error {
	d.sent = append(d.sent, *cmd)

	if cmd.Opcode != OpGetLogPage {
		return errors.New("unexpected command")
	}

	for i := range data {
		data[i] = byte(cmd.CDW10 & 0xff)
	}

	return nil
}

// TestGetLogPage: the page and its length in dwords (0's based, split across CDW10 and
// CDW11) as the specification lays them out.
func TestGetLogPage(t *testing.T) {
	t.Parallel()

	dev := &logDevice{}

	page, err := GetLogPage(dev, 0x02, GlobalNSID, 512)
	require.NoError(t, err)
	assert.Len(t, page, 512)
	assert.Equal(t, byte(0x02), page[511])

	cmd := dev.sent[0]
	assert.Equal(t, uint8(OpGetLogPage), cmd.Opcode)
	assert.Equal(t, uint32(GlobalNSID), cmd.NSID)
	assert.Equal(t, uint32(0x02|127<<16), cmd.CDW10, "NUMDL: 128 dwords, 0's based")
	assert.Equal(t, uint32(0), cmd.CDW11)

	_, err = GetLogPage(dev, 0x02, GlobalNSID, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x02|0xffff<<16), dev.sent[1].CDW10)
	assert.Equal(t, uint32(0x3), dev.sent[1].CDW11, "NUMDU: the upper bits")

	_, err = GetLogPage(dev, 0x02, GlobalNSID, 510)
	assert.ErrorContains(t, err, "dwords")
}
