package siderolink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"slices"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// The node unique token is what tells Omni one machine from another where SMBIOS UUIDs
// repeat, and a reinstalled machine from an impostor. Talos keeps it in META (key 0x10,
// written by Omni) and sends it as it is; its format is that of Omni's
// client/pkg/jointoken (NodeUniqueToken.Encode): the JSON of a fingerprint of the
// machine's NICs and a random part. It is written here rather than imported: that
// package pulls in Talos' whole API client, 1.2 MB of the agent, for twenty lines. The
// tests check it against Omni's package.

// uniqueToken is jointoken.NodeUniqueToken: the field names are the wire format.
type uniqueToken struct {
	Fingerprint string
	Token       string
}

// Fingerprint is Omni's machine fingerprint (jointoken.GetMachineFingerprint): the hex
// SHA-256 over the MAC addresses, as bytes, sorted bytewise and concatenated. macs should
// be LinkMACs' — the physical links', each its permanent address where it has one.
func Fingerprint(macs []net.HardwareAddr) string {
	sorted := slices.Clone(macs)
	slices.SortFunc(sorted, func(a, b net.HardwareAddr) int { return bytes.Compare(a, b) })

	h := sha256.New()
	for _, mac := range sorted {
		h.Write(mac)
	}

	return hex.EncodeToString(h.Sum(nil))
}

// NodeUniqueToken encodes a node unique token from the machine's MACs and a random part
// (Omni makes its own with a random UUID, as NewUniqueToken does).
func NodeUniqueToken(macs []net.HardwareAddr, random string) (string, error) {
	b, err := json.Marshal(uniqueToken{Fingerprint: Fingerprint(macs), Token: random})
	if err != nil {
		return "", fmt.Errorf("error encoding the node unique token: %w", err)
	}

	return string(b), nil
}

// NewUniqueToken is a node unique token with a fresh random part, a version 4 UUID.
func NewUniqueToken(macs []net.HardwareAddr) (string, error) {
	random, err := uuid.NewRandom()
	if err != nil {
		return "", fmt.Errorf("error making the node unique token's random part: %w", err)
	}

	return NodeUniqueToken(macs, random.String())
}

// LinkMACs picks the MACs Omni fingerprints from links, as GetMachineFingerprint does:
// those of physical links, each its permanent address where it has one (a bond or a
// driver may have changed the current one), else its current address.
func LinkMACs(links []*network.LinkStatus) []net.HardwareAddr {
	var macs []net.HardwareAddr

	for _, l := range links {
		spec := l.TypedSpec()
		if !spec.Physical() {
			continue
		}

		for _, addr := range []net.HardwareAddr{net.HardwareAddr(spec.PermanentAddr), net.HardwareAddr(spec.HardwareAddr)} {
			if len(addr) > 0 {
				macs = append(macs, addr)

				break
			}
		}
	}

	return macs
}
