package members_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent/internal/members"
	"github.com/anvil-metal/anvil/agent/internal/members/memberstest"
)

func TestMembers(t *testing.T) {
	t.Parallel()

	array := [16]byte{0x6d, 0x64, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}

	for _, tc := range []struct {
		name  string
		write func(b []byte)
		want  []members.Member
	}{
		{name: "an md RAID member", write: memberstest.MD(array, "lab:0"), want: []members.Member{
			{Kind: members.KindMD, Set: "6d640001-0203-0405-0607-08090a0b0c0d", Name: "lab:0"},
		}},
		{name: "an LVM physical volume", write: memberstest.LVM("AbCdEfGhIjKlMnOpQrStUvWxYz012345"), want: []members.Member{
			{Kind: members.KindLVM, Set: "AbCdEf-GhIj-KlMn-OpQr-StUv-WxYz-012345"},
		}},
		{name: "nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			path := filepath.Join(t.TempDir(), "disk.img")
			memberstest.Write(t, path, tc.write)

			before, err := os.ReadFile(path)
			require.NoError(t, err)

			got, err := members.Read(path)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)

			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, before, after, "reading the members writes nothing")
		})
	}

	_, err := members.Read(filepath.Join(t.TempDir(), "gone"))
	assert.ErrorContains(t, err, "error reading the signatures of")
}
