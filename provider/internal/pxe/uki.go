package pxe

import (
	"encoding/hex"
	"strings"
)

// UKIPath is where a UEFI HTTP boot client gets its own Unified Kernel Image, relative to
// the HTTP boot base: uki/<arch>/<uuid>/<mac>/boot.efi. The provider's handler reads the
// machine from it as it reads a boot-script query, so the image carries that machine's
// command line (its token). The UUID is all zeros when option 97 carries none (the
// handler then names the machine by its MAC, as for iPXE's null UUID); the MAC is
// hex with hyphens, as iPXE's ${netX/mac:hexhyp}. The name ends in .efi: UEFI HTTP boot
// tells an EFI image by its extension when the server names no content type.
func UKIPath(arch string, guid, mac []byte) string {
	return "uki/" + arch + "/" + GUIDString(guid) + "/" + hexHyphen(mac) + "/boot.efi"
}

// GUIDString is the UUID in a DHCP client machine identifier (option 97: type 0, then 16
// bytes) as text, or the null UUID (all zeros) when there is none. UEFI firmware sends the SMBIOS UUID
// in EFI_GUID order, its first three fields little-endian, where the text form (and
// iPXE's ${uuid}, and the OS's SMBIOS reading) is big-endian: they are swapped back.
func GUIDString(guid []byte) string {
	if len(guid) != 17 || guid[0] != 0 {
		return nullUUID
	}

	g := guid[1:]

	var b [16]byte

	b[0], b[1], b[2], b[3] = g[3], g[2], g[1], g[0]
	b[4], b[5] = g[5], g[4]
	b[6], b[7] = g[7], g[6]
	copy(b[8:], g[8:])

	h := hex.EncodeToString(b[:])

	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

const nullUUID = "00000000-0000-0000-0000-000000000000"

func hexHyphen(mac []byte) string {
	var sb strings.Builder

	for i, c := range mac {
		if i > 0 {
			sb.WriteByte('-')
		}

		sb.WriteString(hex.EncodeToString([]byte{c}))
	}

	return sb.String()
}
