package boot_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/provider/internal/boot"
)

func TestParseQuery(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		query   string
		want    boot.Request
		wantErr string
	}{
		{
			query: "uuid=4C4C4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios",
			want:  boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", UUID: "4c4c4544-0000-1000-8000-000000000001", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "bios"},
		},
		{
			query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52:54:00:12:34:56&arch=x86_64&platform=efi",
			want:  boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", UUID: "4c4c4544-0000-1000-8000-000000000001", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "uefi"},
		},
		{
			query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=arm64&platform=efi",
			want:  boot.Request{MachineID: "4c4c4544-0000-1000-8000-000000000001", UUID: "4c4c4544-0000-1000-8000-000000000001", MAC: "52:54:00:12:34:56", Arch: "arm64", Firmware: "uefi"},
		},
		{
			query: "uuid=00000000-0000-0000-0000-000000000000&mac=52-54-00-12-34-56&arch=x86_64&platform=efi",
			want:  boot.Request{MachineID: "mac-525400123456", UUID: "00000000-0000-0000-0000-000000000000", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "uefi"},
		},
		{
			query: "uuid=FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF&mac=52-54-00-12-34-56&arch=x86_64&platform=efi",
			want:  boot.Request{MachineID: "mac-525400123456", UUID: "ffffffff-ffff-ffff-ffff-ffffffffffff", MAC: "52:54:00:12:34:56", Arch: "amd64", Firmware: "uefi"},
		},
		{query: "mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "missing uuid"},
		{query: "uuid=&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "missing uuid"},
		{query: "uuid=not-a-uuid&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=4c4c4544x0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=4c4c4544-0000-1000-8000-00000000000g&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=${uuid}&mac=52-54-00-12-34-56&arch=i386&platform=pcbios", wantErr: "invalid uuid"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&arch=i386&platform=pcbios", wantErr: "missing mac"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34&arch=i386&platform=pcbios", wantErr: "invalid mac"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=00-00-00-00-fe-80-00-00-00-00-00-00-02-00-5e-10-00-00-00-01&arch=i386&platform=pcbios", wantErr: "invalid mac"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&platform=pcbios", wantErr: "missing arch"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=riscv64&platform=efi", wantErr: "unsupported arch"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386", wantErr: "missing platform"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=xen", wantErr: "unknown platform"},
		{query: "uuid=%zz", wantErr: "malformed query"},
		{query: "uuid=4c4c4544-0000-1000-8000-000000000001&pad=" + strings.Repeat("x", boot.MaxQueryLength), wantErr: "longer than"},
	} {
		t.Run(tc.query[:min(len(tc.query), 60)], func(t *testing.T) {
			t.Parallel()

			got, err := boot.ParseQuery(tc.query)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, boot.ErrBadRequest)
				assert.ErrorContains(t, err, tc.wantErr)

				return
			}

			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseQuery(f *testing.F) {
	f.Add("uuid=4c4c4544-0000-1000-8000-000000000001&mac=52-54-00-12-34-56&arch=i386&platform=pcbios")
	f.Add("uuid=00000000-0000-0000-0000-000000000000&mac=52:54:00:12:34:56&arch=arm64&platform=efi")
	f.Add("uuid=%zz&&&=")

	f.Fuzz(func(t *testing.T, q string) {
		req, err := boot.ParseQuery(q)
		if err != nil {
			return
		}

		// Whatever parses must be safe to put in a URL path, a script and a resource ID.
		for _, s := range []string{req.MachineID, req.MAC, req.Arch, req.Firmware} {
			if s == "" || strings.ContainsAny(s, " \n\r/${}&?") {
				t.Fatalf("unsafe field %q parsed from %q", s, q)
			}
		}
	})
}
