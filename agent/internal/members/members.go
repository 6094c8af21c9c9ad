// Package members reads what md RAID arrays and LVM volume groups a disk belongs to from
// the metadata on it (the agent never assembles either), opening it read-only.
package members

import (
	"fmt"

	"github.com/siderolabs/go-blockdevice/v2/blkid"
)

// Member is a disk's (or one of its partitions') part in an md RAID array or an LVM
// volume group, as the metadata on it says: the agent never assembles either, so it
// reads them from the disks.
type Member struct {
	// Kind is KindMD or KindLVM.
	Kind string
	// Set names what the member belongs to: an md array's UUID, which every member of
	// the array carries; for LVM, the physical volume's own UUID.
	Set string
	// Name is the md array's name ("host:0"), "" for LVM.
	Name string
	// Partition is the partition holding the metadata (1-based), 0 for the whole disk.
	Partition uint
}

// Member kinds, as blkid names the signatures.
const (
	KindMD  = "md"
	KindLVM = "lvm"
)

// Signature names, as blkid (and Talos' DiscoveredVolume) name them.
const (
	SignatureMD  = "linux_raid_member"
	SignatureLVM = "lvm2-pv"
)

// blkidKinds maps go-blockdevice's signature names to member kinds.
var blkidKinds = map[string]string{SignatureMD: KindMD, SignatureLVM: KindLVM}

// Signature is the blkid name of the member's signature.
func (m Member) Signature() string {
	if m.Kind == KindMD {
		return SignatureMD
	}

	return SignatureLVM
}

// Device is the kernel name of the member's device: the disk's, or its partition's
// ("sda1", "nvme0n1p1").
func (m Member) Device(disk string) string {
	if m.Partition == 0 {
		return disk
	}

	sep := ""
	if last := disk[len(disk)-1]; last >= '0' && last <= '9' {
		sep = "p"
	}

	return fmt.Sprintf("%s%s%d", disk, sep, m.Partition)
}

// Read reads the md and LVM metadata of the disk at path and of its partitions, opening
// it read-only.
func Read(path string) ([]Member, error) {
	info, err := blkid.ProbePath(path, blkid.WithSkipLocking(true))
	if err != nil {
		return nil, fmt.Errorf("error reading the signatures of %s: %w", path, err)
	}

	var members []Member

	if m, ok := memberOf(info.ProbeResult, 0); ok {
		members = append(members, m)
	}

	for _, part := range info.Parts {
		if m, ok := memberOf(part.ProbeResult, part.PartitionIndex); ok {
			members = append(members, m)
		}
	}

	return members, nil
}

func memberOf(r blkid.ProbeResult, partition uint) (Member, bool) {
	kind, ok := blkidKinds[r.Name]
	if !ok {
		return Member{}, false
	}

	m := Member{Kind: kind, Partition: partition}

	switch {
	case kind == KindMD && r.UUID != nil:
		m.Set = r.UUID.String()
	case kind == KindLVM && r.Label != nil:
		m.Set = *r.Label // the PV's UUID
	}

	if kind == KindMD && r.Label != nil {
		m.Name = *r.Label
	}

	return m, true
}
