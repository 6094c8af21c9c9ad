package fleetsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
)

// identity is what a simulated machine is, derived from the seed and its index alone.
type identity struct {
	Index  int
	UUID   string
	Serial string
	// MACs of its NICs; the first is the one it PXE-boots from.
	MACs  []net.HardwareAddr
	Disks []diskShape
	// Profile picks the SMBIOS fixture the machine's processors and memory come from.
	Profile int
	// rand is the rest of the digest, for whatever else varies.
	rand uint64
}

// diskShape is one disk of a simulated machine.
type diskShape struct {
	Name, Model, Serial, Transport string
	Size                           uint64
	Rotational                     bool
}

// identityOf derives machine index's identity under seed: sha256("fleetsim/<seed>/<index>")
// gives its UUID (version-4 form), serial, NICs' MACs (locally administered) and disks.
func identityOf(seed int64, index int) identity {
	sum := sha256.Sum256(fmt.Appendf(nil, "fleetsim/%d/%d", seed, index))
	more := sha256.Sum256(sum[:])

	u := sum[:16]
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80

	id := identity{
		Index:  index,
		UUID:   fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]),
		Serial: fmt.Sprintf("SIM%08X", binary.BigEndian.Uint32(sum[16:20])),
		rand:   binary.BigEndian.Uint64(more[8:16]),
	}

	id.Profile = int(more[0])

	nics := 2 + int(more[1])%3
	for n := range nics {
		// 02: locally administered; then the index, so MACs never collide within a seed.
		id.MACs = append(id.MACs, net.HardwareAddr{0x02, byte(seed), byte(index >> 16), byte(index >> 8), byte(index), byte(n)}) //nolint:gosec // the low bits, on purpose
	}

	disks := 1 + int(more[2])%8
	for d := range disks {
		kind := (int(more[3]) + d) % 3
		size := (1 + uint64(more[4+d%4])%16) * 240 << 30

		shape := diskShape{Serial: fmt.Sprintf("%s-D%d", id.Serial, d), Size: size}

		switch kind {
		case 0:
			shape.Name, shape.Model, shape.Transport = fmt.Sprintf("nvme%dn1", d), "SAMSUNG MZQL23T8HCLS", "nvme"
		case 1:
			shape.Name, shape.Model, shape.Transport = fmt.Sprintf("sd%c", 'a'+d), "INTEL SSDSC2KB960G8", "sata"
		default:
			shape.Name, shape.Model, shape.Transport, shape.Rotational = fmt.Sprintf("sd%c", 'a'+d), "ST4000NM0295", "sas", true
			shape.Size *= 4
		}

		id.Disks = append(id.Disks, shape)
	}

	return id
}
