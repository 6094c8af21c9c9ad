// Package memberstest writes disk images that are md RAID members or LVM physical
// volumes, as mdadm --create and pvcreate leave them, for tests of what reads them.
package memberstest

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// ImageSize is the size of the images written.
const ImageSize = 1 << 20

// Write writes an image of ImageSize at path with what write puts in it.
func Write(t testing.TB, path string, write func(b []byte)) {
	t.Helper()

	b := make([]byte, ImageSize)
	if write != nil {
		write(b)
	}

	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// MD writes an md v1.2 superblock (4 KiB into the device) of array uuid, named name: the
// constant part of struct mdp_superblock_1.
func MD(uuid [16]byte, name string) func(b []byte) {
	return func(b []byte) {
		sb := b[4096:]
		binary.LittleEndian.PutUint32(sb[0:], 0xa92b4efc) // magic
		binary.LittleEndian.PutUint32(sb[4:], 1)          // major version
		copy(sb[16:32], uuid[:])
		copy(sb[32:64], name)
		binary.LittleEndian.PutUint32(sb[72:], 1)     // level: RAID1
		binary.LittleEndian.PutUint32(sb[92:], 2)     // raid disks
		binary.LittleEndian.PutUint64(sb[128:], 2048) // data offset
		binary.LittleEndian.PutUint64(sb[144:], 8)    // super offset: sector 8
	}
}

// LVM writes an LVM2 physical volume label in the second sector with the PV UUID pv
// (32 characters).
func LVM(pv string) func(b []byte) {
	return func(b []byte) {
		l := b[512:]
		copy(l[0:], "LABELONE")
		binary.LittleEndian.PutUint64(l[8:], 1) // this sector
		binary.LittleEndian.PutUint32(l[20:], 32)
		copy(l[24:], "LVM2 001")
		copy(l[32:64], pv)
	}
}
